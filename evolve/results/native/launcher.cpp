// The native launcher of best.py (evolve/results/native/__init__.py builds it once per PyTorch):
// a winner's launches on PyTorch tensors with no Python on a call's way, and its custom op as C++
// kernels of the dispatcher. Python prepares each shape once (checks, sizes, plan, scratch: the
// `miss` callable); here a call looks its shape up, allocates its outputs, writes the tensors'
// addresses into the kernel parameters and calls cuLaunchKernelEx on PyTorch's current stream.
// Fixed source: no task or kernel text is ever pasted into it.
#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

using Values = std::vector<std::optional<at::Tensor>>;
using Sizes = std::vector<int64_t>;

// ---- the driver, from libcuda itself (the process has it loaded: PyTorch and CuPy use it) ----
struct Driver {
  CUresult (*launch)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  CUresult (*memset)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*get_context)(CUcontext*) = nullptr;
  CUresult (*set_context)(CUcontext) = nullptr;
  CUresult (*error_name)(CUresult, const char**) = nullptr;

  Driver() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) throw std::runtime_error("the native launcher cannot open libcuda.so.1");
    bind(lib, launch, "cuLaunchKernelEx");
    bind(lib, memset, "cuMemsetD8Async");
    bind(lib, get_context, "cuCtxGetCurrent");
    bind(lib, set_context, "cuCtxSetCurrent");
    bind(lib, error_name, "cuGetErrorName");
  }

  template <class F>
  static void bind(void* lib, F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (f == nullptr) throw std::runtime_error(std::string("libcuda has no ") + name);
  }

  void check(CUresult r, const std::string& what) const {
    if (r == CUDA_SUCCESS) return;
    const char* name = nullptr;
    error_name(r, &name);
    throw std::runtime_error(what + ": " + (name ? name : "CUDA error " + std::to_string(int(r))));
  }
};

const Driver& driver() {
  static const Driver d;
  return d;
}

// ---- what a shape fixes: made once by Python's `miss`, then read by every call of the shape ----
enum ArgKind { INT32 = 0, SLOT = 1, FIXED = 2 };  // a value, a task argument's address, a scratch address

struct Param {
  int kind;
  int64_t value;
};

struct Launch {
  CUfunction function;
  unsigned grid[3], block[3], shared, cluster[3];
  bool clustered;
  std::vector<Param> params;
  std::string label;  // "kernel grid=(...) block=(...)", for a failed launch's one line
};

struct Output {
  int index;
  std::vector<int64_t> shape;
  at::TensorOptions options;  // the dtype and device of a prototype Python gave
};

struct Prepared {
  CUcontext context;
  std::vector<std::pair<CUdeviceptr, size_t>> zero;  // scratch zeroed before each call
  std::vector<Output> outputs;
  std::vector<at::Tensor> scratch;  // held as long as the shape is cached
  std::vector<Launch> launches;
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const noexcept {
    size_t h = key.size();
    for (int64_t v : key) h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
};

// Holds a Python object for C++ owners that may be destroyed without the GIL (a dispatcher
// registration): the reference is dropped with the GIL taken, and leaked at interpreter exit.
struct PyRef {
  py::object object;
  explicit PyRef(py::object o) : object(std::move(o)) {}
  ~PyRef() {
    if (!Py_IsInitialized()) {
      object.release();
      return;
    }
    py::gil_scoped_acquire gil;
    object = py::object();
  }
};

class Launcher {
 public:
  Launcher(int n_args, int first, py::object miss, size_t max_cached)
      : n_args_(n_args), first_(first), miss_(std::make_shared<PyRef>(std::move(miss))), max_cached_(max_cached) {}

  int n_args() const { return n_args_; }
  size_t cached() const { return cache_.size(); }

  // The launch: `values` in the task's argument order (nullopt: an output to allocate), `sizes`
  // one per size name (-1: not given); returns them with the outputs made. Called with or
  // without the GIL: only a shape not cached takes it (to ask Python).
  Values run(Values values, const Sizes& sizes) {
    if (int(values.size()) != n_args_) throw std::invalid_argument("wrong number of arguments");
    const std::optional<at::Tensor>& first = values[first_];
    if (!first || !first->defined() || !first->is_cuda()) {
      ask(values, sizes, -1, 0);  // Python's checks refuse it in one line
      throw std::runtime_error("the first input must be a CUDA tensor");
    }
    const int device = first->get_device();
    const CUstream stream = c10::cuda::getCurrentCUDAStream(device).stream();
    std::vector<int64_t> key;
    key.reserve(4 + 8 * values.size() + sizes.size());
    key.push_back(reinterpret_cast<int64_t>(stream));
    for (const auto& v : values) {
      if (!v || !v->defined()) {
        key.push_back(-1);
        continue;
      }
      key.push_back(v->dim());
      for (int64_t d : v->sizes()) key.push_back(d);
      key.push_back(int64_t(v->scalar_type()));
      key.push_back(v->get_device());
      key.push_back(v->is_contiguous());
    }
    key.insert(key.end(), sizes.begin(), sizes.end());
    std::shared_ptr<const Prepared> p;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = cache_.find(key);
      if (found != cache_.end()) p = found->second;
    }
    if (!p) p = prepare(std::move(key), values, sizes, device, stream);
    for (const Output& o : p->outputs) values[o.index] = at::empty(o.shape, o.options);
    enqueue(*p, values, stream);
    return values;
  }

 private:
  // Python's description of a shape (evolve.results.native.NativePath.describe), kept.
  std::shared_ptr<const Prepared> prepare(std::vector<int64_t> key, const Values& values, const Sizes& sizes,
                                          int device, CUstream stream) {
    auto p = std::make_shared<Prepared>();
    {
      py::gil_scoped_acquire gil;
      py::tuple d = ask(values, sizes, device, reinterpret_cast<int64_t>(stream));
      p->context = reinterpret_cast<CUcontext>(d[0].cast<int64_t>());
      for (auto z : d[1].cast<py::list>()) {
        auto t = z.cast<py::tuple>();
        p->zero.emplace_back(CUdeviceptr(t[0].cast<uint64_t>()), t[1].cast<size_t>());
      }
      for (auto o : d[2].cast<py::list>()) {
        auto t = o.cast<py::tuple>();
        p->outputs.push_back({t[0].cast<int>(), t[1].cast<std::vector<int64_t>>(), t[2].cast<at::Tensor>().options()});
      }
      for (auto s : d[3].cast<py::list>()) p->scratch.push_back(s.cast<at::Tensor>());
      for (auto l : d[4].cast<py::list>()) {
        auto t = l.cast<py::tuple>();
        Launch one{};
        one.function = reinterpret_cast<CUfunction>(t[0].cast<int64_t>());
        auto grid = t[1].cast<std::vector<unsigned>>(), block = t[2].cast<std::vector<unsigned>>();
        for (int i = 0; i < 3; ++i) one.grid[i] = grid.at(i), one.block[i] = block.at(i);
        one.shared = t[3].cast<unsigned>();
        one.clustered = !t[4].is_none();
        if (one.clustered) {
          auto c = t[4].cast<std::vector<unsigned>>();
          for (int i = 0; i < 3; ++i) one.cluster[i] = c.at(i);
        }
        for (auto a : t[5].cast<py::list>()) {
          auto pair = a.cast<py::tuple>();
          one.params.push_back({pair[0].cast<int>(), pair[1].cast<int64_t>()});
        }
        one.label = t[6].cast<std::string>();
        p->launches.push_back(std::move(one));
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache_.size() >= max_cached_) cache_.clear();
    cache_[std::move(key)] = p;
    return p;
  }

  py::tuple ask(const Values& values, const Sizes& sizes, int device, int64_t stream) {
    py::gil_scoped_acquire gil;
    py::list given;
    for (const auto& v : values) given.append(v && v->defined() ? py::cast(*v) : py::none());
    return miss_->object(given, py::cast(sizes), device, stream).cast<py::tuple>();
  }

  void enqueue(const Prepared& p, const Values& values, CUstream stream) const {
    const Driver& drv = driver();
    CUcontext current = nullptr;
    drv.check(drv.get_context(&current), "cuCtxGetCurrent");
    const bool switched = current != p.context;  // another device's (or no) context is current
    if (switched) drv.check(drv.set_context(p.context), "cuCtxSetCurrent");
    struct Restore {
      const Driver& drv;
      bool on;
      CUcontext to;
      ~Restore() {
        if (on) drv.set_context(to);
      }
    } restore{drv, switched, current};
    for (const auto& z : p.zero) drv.check(drv.memset(z.first, 0, z.second, stream), "cuMemsetD8Async");
    c10::SmallVector<uint64_t, 32> store;
    c10::SmallVector<void*, 32> params;
    for (const Launch& one : p.launches) {
      store.resize(one.params.size());
      params.resize(one.params.size());
      for (size_t i = 0; i < one.params.size(); ++i) {
        const Param& a = one.params[i];
        store[i] = a.kind == SLOT    ? reinterpret_cast<uint64_t>(values[a.value]->data_ptr())
                   : a.kind == INT32 ? uint64_t(uint32_t(int32_t(a.value)))  // the low 4 bytes: an int
                                     : uint64_t(a.value);
        params[i] = &store[i];
      }
      CUlaunchAttribute attr{};
      CUlaunchConfig config{};
      config.gridDimX = one.grid[0], config.gridDimY = one.grid[1], config.gridDimZ = one.grid[2];
      config.blockDimX = one.block[0], config.blockDimY = one.block[1], config.blockDimZ = one.block[2];
      config.sharedMemBytes = one.shared;
      config.hStream = stream;
      if (one.clustered) {
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = one.cluster[0], attr.value.clusterDim.y = one.cluster[1];
        attr.value.clusterDim.z = one.cluster[2];
        config.attrs = &attr;
        config.numAttrs = 1;
      }
      drv.check(drv.launch(&config, one.function, params.empty() ? nullptr : params.data(), nullptr),
                "launching " + one.label);
    }
  }

  const int n_args_, first_;
  std::shared_ptr<PyRef> miss_;
  const size_t max_cached_;
  std::mutex mutex_;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Prepared>, KeyHash> cache_;
};

// A Python exception raised while a shape was prepared, as the dispatcher's own (c10::TypeError
// and c10::ValueError reach Python as TypeError and ValueError, with the one-line message).
[[noreturn]] void rethrow(py::error_already_set& e) {
  std::string message;
  bool type_error, value_error;
  {
    py::gil_scoped_acquire gil;
    message = py::str(e.value());
    type_error = e.matches(PyExc_TypeError);
    value_error = e.matches(PyExc_ValueError);
  }
  if (type_error) TORCH_CHECK_TYPE(false, message);
  if (value_error) TORCH_CHECK_VALUE(false, message);
  TORCH_CHECK(false, message);
}

// The custom op's CUDA kernel: its tensors are the task's inputs (at `arg_at`), its ints the sizes
// no shape says (at `size_at` among the size names); it returns the task's fresh outputs.
class OpKernel final : public c10::OperatorKernel {
 public:
  OpKernel(std::shared_ptr<Launcher> launcher, std::vector<int> arg_at, std::vector<int> size_at, int n_sizes,
           std::vector<int> outs)
      : launcher_(std::move(launcher)), arg_at_(std::move(arg_at)), size_at_(std::move(size_at)),
        n_sizes_(n_sizes), outs_(std::move(outs)) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n = arg_at_.size() + size_at_.size();
    auto args = torch::jit::last(*stack, n);
    Values values(launcher_->n_args());
    for (size_t i = 0; i < arg_at_.size(); ++i) values[arg_at_[i]] = args[i].toTensor();
    Sizes sizes(n_sizes_, -1);
    for (size_t i = 0; i < size_at_.size(); ++i) sizes[size_at_[i]] = args[arg_at_.size() + i].toInt();
    Values made;
    try {
      made = launcher_->run(std::move(values), sizes);
    } catch (py::error_already_set& e) {
      rethrow(e);
    } catch (const std::runtime_error& e) {
      TORCH_CHECK(false, e.what());
    }
    torch::jit::drop(*stack, n);
    for (int i : outs_) torch::jit::push(*stack, *made[i]);
  }

 private:
  std::shared_ptr<Launcher> launcher_;
  std::vector<int> arg_at_, size_at_;
  int n_sizes_;
  std::vector<int> outs_;
};

// A functional op's autograd kernel: with nothing to record, straight to the CUDA kernel below;
// else Python's (`slow`: the forward-only formula, evolve.results.forward_only).
class AutogradKernel final : public c10::OperatorKernel {
 public:
  explicit AutogradKernel(py::object slow) : slow_(std::make_shared<PyRef>(std::move(slow))) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    bool records = false;
    if (at::GradMode::is_enabled()) {
      for (const c10::IValue& v : torch::jit::last(*stack, n))
        if (v.isTensor() && v.toTensor().requires_grad()) records = true;
    }
    if (!records) {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
      return;
    }
    py::gil_scoped_acquire gil;
    py::tuple args(n);
    size_t i = 0;
    for (const c10::IValue& v : torch::jit::last(*stack, n))
      args[i++] = v.isTensor() ? py::cast(v.toTensor()) : py::cast(v.toInt());
    torch::jit::drop(*stack, n);
    py::object result = slow_->object(*args);
    if (py::isinstance<py::tuple>(result)) {
      for (auto r : result.cast<py::tuple>()) torch::jit::push(*stack, r.cast<at::Tensor>());
    } else if (!result.is_none()) {
      torch::jit::push(*stack, result.cast<at::Tensor>());
    }
  }

 private:
  std::shared_ptr<PyRef> slow_;
};

// The registrations of one op: they last as long as this object (Python holds it).
struct Registration {
  std::vector<std::unique_ptr<torch::Library>> libraries;
};

std::unique_ptr<Registration> register_op(const std::string& ns, const std::string& name,
                                          std::shared_ptr<Launcher> launcher, std::vector<int> arg_at,
                                          std::vector<int> size_at, int n_sizes, std::vector<int> outs,
                                          py::object slow) {
  auto reg = std::make_unique<Registration>();
  // At CPU too, so that host tensors get the launcher's one-line refusal, not the dispatcher's dump.
  for (c10::DispatchKey key : {c10::DispatchKey::CUDA, c10::DispatchKey::CPU}) {
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                std::make_unique<OpKernel>(launcher, arg_at, size_at, n_sizes, outs)));
    reg->libraries.push_back(std::move(lib));
  }
  if (!slow.is_none()) {
    auto grad = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::Autograd, __FILE__,
                                                 __LINE__);
    grad->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutogradKernel>(std::move(slow))));
    reg->libraries.push_back(std::move(grad));
  }
  return reg;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Launcher, std::shared_ptr<Launcher>>(m, "Launcher")
      .def(py::init<int, int, py::object, size_t>(), py::arg("n_args"), py::arg("first"), py::arg("miss"),
           py::arg("max_cached"))
      .def("run", &Launcher::run, py::arg("values"), py::arg("sizes"))
      .def_property_readonly("cached", &Launcher::cached);
  py::class_<Registration>(m, "Registration");
  m.def("register_op", &register_op, py::arg("namespace"), py::arg("name"), py::arg("launcher"),
        py::arg("arg_at"), py::arg("size_at"), py::arg("n_sizes"), py::arg("outs"), py::arg("slow"));
}
