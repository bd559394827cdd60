"""Launching a winner on PyTorch tensors in a few microseconds: what ``best.py`` does per call.

Going through CuPy costs 80-230 µs a call (a DLPack export per tensor, a device and a stream
object, CuPy's argument conversion). Here everything that depends only on the shapes is done
once per (device, stream, shapes, sizes) and kept: the sizes bound from the shapes, the plan, the
scratch buffers (allocated once through PyTorch's caching allocator, so they live on that
stream), the CUfunction handles, each launch's ``kernelParams`` array with its holders and its
launch configuration as ctypes values (a typed ctypes call converts them on every call). A call
looks its shape, dtypes, devices and contiguity up, writes the tensors' ``data_ptr()``s into the
holders and calls ``cuLaunchKernelEx`` (ctypes on libcuda, in the context CuPy loaded the module
into) on PyTorch's current raw stream: no synchronization and no allocation but the outputs it is asked
to make, so a call can be captured in a CUDA graph (make one call at the shapes before capturing,
so that the scratch is not allocated inside the graph's pool). Plans with tensor maps keep the
CuPy path (a map is encoded over each buffer's address).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evolve import dtypes
from evolve.evaluate.plan import Call, LaunchPlan
from evolve.task.task import Task, size_label

MAX_CACHED = 256  # shapes kept per kernel: a model calls it at a handful
# a launch made outside the module's context: CUDA_ERROR_INVALID_CONTEXT (no context current) and
# CUDA_ERROR_INVALID_HANDLE (another context's function or stream)
OUT_OF_CONTEXT = frozenset({201, 400})


class Packed:
    """One launch's ``kernelParams``: a holder per parameter (``c_void_p`` per buffer, ``c_int32``
    per int, as ``plan.ARG_BYTES`` lays them out) and the ``void*`` array that points at them.
    Built once per shape; per call only the pointers of the task's arguments are written."""

    def __init__(self, call: Call, slots: Mapping[str, int], fixed: Mapping[str, int]):
        self.holders: list[ctypes.c_void_p | ctypes.c_int32] = []
        self.updates: list[tuple[ctypes.c_void_p, int]] = []  # holder, index into the call's pointers
        for kind, value in call.args:
            if kind == "int32":
                self.holders.append(ctypes.c_int32(int(value)))
            elif kind == "buffer" and str(value) in slots:
                holder = ctypes.c_void_p(0)
                self.holders.append(holder)
                self.updates.append((holder, slots[str(value)]))
            elif kind == "buffer":
                self.holders.append(ctypes.c_void_p(fixed[str(value)]))
            else:
                raise ValueError(f"{call.kernel}: a {kind} argument is not launched by pointer")
        self.params = (ctypes.c_void_p * max(1, len(self.holders)))(
            *[ctypes.addressof(h) for h in self.holders])

    def write(self, pointers: Sequence[int]) -> None:
        for holder, index in self.updates:
            holder.value = pointers[index]


def bind(task: Task, shapes: Mapping[str, Sequence[int]], sizes: Mapping[str, int] | None = None
         ) -> dict[str, int]:
    """The problem sizes that give the arguments these shapes (a size that no dimension names
    plainly must be given); ValueError says which argument does not fit."""
    names = list(task.correctness_sizes[0])
    found: dict[str, int] = {k: int(v) for k, v in (sizes or {}).items()}
    if unknown := set(found) - set(names):
        raise ValueError(f"{task.name}: unknown size(s) {sorted(unknown)}; the sizes are {', '.join(names)}")
    for arg in task.args:
        shape = shapes.get(arg.name)
        if shape is None:
            continue
        if len(shape) != len(arg.shape):
            raise ValueError(f"{task.name}: {arg.name} must have {len(arg.shape)} dimensions "
                             f"[{', '.join(e.text for e in arg.shape)}], got shape {tuple(shape)}")
        for e, dim in zip(arg.shape, shape, strict=True):
            if e.text in names and found.setdefault(e.text, int(dim)) != int(dim):
                raise ValueError(f"{task.name}: {arg.name} has {e.text} = {dim} but another argument "
                                 f"(or the call) says {e.text} = {found[e.text]}")
    plain = (task.config.get("torch") or {}).get("sizes")
    if (missing := [n for n in names if n not in found]) and plain and all(k in found for k in plain):
        # a PyTorch task's derived sizes (a convolution's output extents, model_flops): its problem
        # file evaluated at these sizes on the meta device, once per shape
        from evolve.task.torch_sizes import derived_sizes

        found.update(derived_sizes(task.config, found, missing))
    if missing := [n for n in names if n not in found]:
        raise ValueError(f"{task.name}: give {', '.join(f'{n}=...' for n in missing)} (no argument's "
                         "shape says it)")
    for arg in task.args:
        shape = shapes.get(arg.name)
        if shape is not None and tuple(int(d) for d in shape) != (want := task.shape(arg, found)):
            raise ValueError(f"{task.name}: {arg.name} must have shape {want} at {size_label(found)}, "
                             f"got {tuple(shape)}")
    return found


@dataclass(frozen=True)
class Geometry:
    """What a shape fixes: the sizes, the plan and the outputs to allocate (index, shape, dtype)."""

    sizes: dict[str, int]
    plan: LaunchPlan
    outputs: tuple[tuple[int, tuple[int, ...], str], ...]


def geometry(task: Task, shapes: Sequence[tuple[int, ...] | None], sizes: Mapping[str, int],
             plan: Callable[[dict[str, int]], LaunchPlan]) -> Geometry:
    """Bind the sizes from the shapes of the arguments given (None: an output to allocate) and
    make the plan; ValueError says which argument does not fit."""
    given = {a.name: s for a, s in zip(task.args, shapes, strict=True) if s is not None}
    bound = bind(task, given, sizes)
    outputs = tuple((i, task.shape(a, bound), a.dtype) for i, (a, s) in enumerate(zip(task.args, shapes,
                                                                                      strict=True))
                    if s is None)
    return Geometry(bound, plan(bound), outputs)


@dataclass
class _Prepared:
    geometry: Geometry
    launches: list[Launch]
    zero: list[tuple[int, int]]  # (pointer, bytes) of the scratch zeroed before each call
    context: int
    scratch: list[Any]  # the scratch tensors, held as long as this shape is cached
    # the outputs to allocate: (index, way, input, shape, dtype), by the cheapest way PyTorch has:
    # LIKE an input of the output's shape and dtype (torch.empty_like), else NEW from an input of its
    # dtype (``new_empty(shape)``), else TYPED (``new_empty(shape, dtype=...)`` of the first input)
    outputs: list[tuple[int, int, int, tuple[int, ...], Any]]


LIKE, NEW, TYPED = range(3)


class TorchPath:
    """The per-shape cache and the launch, for one kernel on PyTorch tensors."""

    def __init__(self, task: Task, plan: Callable[[int, dict[str, int]], tuple[Any, LaunchPlan]]):
        import torch

        self.task = task
        self._plan = plan  # (device, sizes) -> (Loaded, LaunchPlan): compiled, loaded and checked once
        self._torch = torch
        self._dtypes = [getattr(torch, a.dtype) for a in task.args]
        self._first = next(i for i, a in enumerate(task.args) if a.role != "output")  # always given
        self._cache: dict[tuple[Any, ...], _Prepared] = {}
        self._lock = threading.Lock()
        self._current = ctypes.c_void_p()  # cuCtxGetCurrent's answer, written under the lock
        self._launch: Any = None  # the driver's, taken at the first shape: CPU-only use needs none
        self._empty_like = torch.empty_like
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._stream = raw or (lambda d: torch.cuda.current_stream(d).cuda_stream)

    def __call__(self, values: list[Any], sizes: Mapping[str, int],
                 refuse: Callable[[list[Any]], None]) -> list[Any]:
        """Launch on the task's arguments in its order (None: an output to allocate); ``refuse``
        raises the one-line error for arguments that fail the per-call checks."""
        device = values[self._first].get_device()  # every line below is paid per call
        if device < 0:
            refuse(values)
            raise ValueError(f"{self.task.name}: a tensor on {values[self._first].device} cannot be "
                             "launched on")
        stream = self._stream(device)
        # what the checks need is in the key: a shape is cached only for right dtypes, devices and
        # contiguity, so a hit has passed them
        key = (stream, *[None if v is None else (v.shape, v.dtype, v.get_device(), v.is_contiguous())
                         for v in values])
        if sizes:
            key += tuple(sizes.items())
        prepared = self._cache.get(key)
        if prepared is None:
            prepared = self._miss(key, device, values, sizes, refuse)
        for index, way, like, shape, dtype in prepared.outputs:
            values[index] = self._empty_like(values[like]) if way == LIKE else \
                values[like].new_empty(shape) if way == NEW else values[like].new_empty(shape, dtype=dtype)
        pointers = [v.data_ptr() for v in values]
        with self._lock:  # the holders are shared: one thread writes and launches at a time
            # without asking for the current context first: a launch outside the module's context
            # fails (no context, or another device's) before anything ran, and is made again in it
            if prepared.zero or not _enqueue(prepared, pointers, stream, self._launch, retry=True):
                launch(prepared, pointers, stream, self._current)
        return values

    def newest(self) -> _Prepared:
        """The launches of the shape prepared last (a bench times one of them bare)."""
        return next(reversed(self._cache.values()))

    def _miss(self, key: tuple[Any, ...], device: int, values: list[Any], sizes: Mapping[str, int],
              refuse: Callable[[list[Any]], None]) -> _Prepared:
        """A shape (or dtype, device, contiguity) not cached: the full checks, then the geometry."""
        check(self.task, self._dtypes, device, values, refuse)
        shape = prepare_shape(self.task, self._plan, device, values, sizes)
        self._launch = launch_ex()
        geo = shape.geometry
        slots = {a.name: i for i, a in enumerate(self.task.args)}
        launches = [Launch(f, c, Packed(c, slots, shape.fixed), key[0])  # the key's first entry: the stream
                    for f, c in zip(shape.functions, geo.plan.calls, strict=True)]
        given = {(tuple(v.shape), v.dtype): i for i, v in enumerate(values) if v is not None}
        typed = {v.dtype: i for i, v in reversed(list(enumerate(values))) if v is not None}
        outputs = []
        for i, out_shape, _ in geo.outputs:
            dtype = self._dtypes[i]
            way, like = (LIKE, given[(out_shape, dtype)]) if (out_shape, dtype) in given else \
                (NEW, typed[dtype]) if dtype in typed else (TYPED, self._first)
            outputs.append((i, way, like, out_shape, dtype))
        prepared = _Prepared(geo, launches, shape.zero, shape.context, shape.scratch, outputs)
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = prepared
        return prepared

    @property
    def cached(self) -> int:
        """How many shapes (and streams) are prepared."""
        return len(self._cache)


def check(task: Task, types: Sequence[Any], device: int, values: Sequence[Any],
          refuse: Callable[[list[Any]], None]) -> None:
    """The full checks of a shape not seen before: ``refuse``'s one-line errors, then every tensor
    of its argument's dtype, on the first input's GPU and contiguous."""
    refuse(list(values))
    for v, dtype in zip(values, types, strict=True):
        if v is not None and (v.dtype is not dtype or v.get_device() != device or not v.is_contiguous()):
            raise TypeError(f"{task.name}: every argument must be a contiguous {dtype} tensor "
                            f"on cuda:{device}")


@dataclass
class Shape:
    """What one shape needs on the device, whichever launcher makes its calls."""

    geometry: Geometry
    functions: list[int]  # the CUfunction of each of the plan's calls
    scratch: list[Any]  # the scratch tensors (PyTorch's allocator), held as long as the shape is
    fixed: dict[str, int]  # scratch name -> its address
    zero: list[tuple[int, int]]  # (address, bytes) zeroed before each call
    context: int  # the module's: the device's primary context


def prepare_shape(task: Task, plan: Callable[[int, dict[str, int]], tuple[Any, LaunchPlan]], device: int,
                  values: Sequence[Any], sizes: Mapping[str, int]) -> Shape:
    """Sizes, plan, module and scratch for arguments already checked (None: an output to make)."""
    import torch

    holder: dict[str, Any] = {}

    def planned(bound: dict[str, int]) -> LaunchPlan:
        holder["loaded"], found = plan(device, bound)
        return found

    geo = geometry(task, [None if v is None else tuple(v.shape) for v in values], sizes, planned)
    loaded = holder["loaded"]
    at = torch.device("cuda", device)
    scratch = [torch.empty(max(1, s.count * dtypes.get(s.dtype).itemsize), dtype=torch.uint8, device=at)
               for s in geo.plan.scratch]
    fixed = {s.name: t.data_ptr() for s, t in zip(geo.plan.scratch, scratch, strict=True)}
    zero = [(fixed[s.name], s.count * dtypes.get(s.dtype).itemsize) for s in geo.plan.scratch if s.zero]
    return Shape(geo, [int(loaded.functions[c.kernel].ptr) for c in geo.plan.calls], scratch, fixed, zero,
                 primary_context(device))


class Launch:
    """One kernel's launch at one shape on one stream: cuLaunchKernelEx's arguments made once as
    ctypes values (the CUlaunchConfig with grid, block, shared bytes, stream and a cluster
    attribute where the call has one; the CUfunction), so that a call converts nothing: four
    arguments cost a third of cuLaunchKernel's eleven through ctypes."""

    def __init__(self, function: int, call: Call, packed: Packed, stream: int) -> None:
        from evolve.evaluate.gpu.hopper import launch_config

        self.call, self.packed = call, packed
        self._config = launch_config(call, stream)  # (config, attributes): held as long as the launch
        self.args = (ctypes.byref(self._config[0]), ctypes.c_void_p(function), packed.params, None)


def launch(prepared: _Prepared, pointers: Sequence[int], stream: int, current: ctypes.c_void_p) -> None:
    """Zero the scratch the spec zeroes and enqueue each launch, in the module's context
    (``current``: a holder for the thread's context, owned by the caller)."""
    lib = _driver()
    lib.cuCtxGetCurrent(ctypes.byref(current))
    before = current.value
    if before != prepared.context:  # another device's (or no) context is current: switch for the launch
        check_result(lib.cuCtxSetCurrent(prepared.context), "cuCtxSetCurrent")
        try:
            _enqueue(prepared, pointers, stream, launch_ex())
        finally:
            lib.cuCtxSetCurrent(before)
    else:
        _enqueue(prepared, pointers, stream, launch_ex())


def _enqueue(prepared: _Prepared, pointers: Sequence[int], stream: int, driver_launch: Any,
             retry: bool = False) -> bool:
    """Zero the scratch and launch; with ``retry``, False where the first launch was refused as
    made outside the module's context (nothing ran then), for the caller to launch again in it.
    Every call pays this loop: it is kept to what a launch needs."""
    for pointer, nbytes in prepared.zero:
        check_result(_driver().cuMemsetD8Async(pointer, 0, nbytes, stream), "cuMemsetD8Async")
    first = True
    for one in prepared.launches:
        one.packed.write(pointers)
        if result := driver_launch(*one.args):
            if retry and first and not prepared.zero and result in OUT_OF_CONTEXT:
                return False
            c = one.call
            check_result(result, f"launching {c.kernel} grid={c.grid} block={c.block}")
        first = False
    return True


_contexts: dict[int, int] = {}


def primary_context(device: int) -> int:
    """The device's primary context: the one CuPy and PyTorch share, and the module lives in."""
    if device not in _contexts:
        lib = _driver()
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        check_result(lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        check_result(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _contexts[device] = int(ctx.value or 0)
    return _contexts[device]


@functools.cache
def launch_ex() -> Any:
    """cuLaunchKernelEx without argtypes, from a handle of its own (the evaluator's has them):
    called with ctypes values made once per shape, it converts nothing per call."""
    launch = ctypes.CDLL(_driver()._name).cuLaunchKernelEx
    launch.restype = ctypes.c_int
    return launch


@functools.cache
def _driver() -> ctypes.CDLL:
    """libcuda, with the signatures of the calls made here added to the evaluator's handle."""
    from evolve.evaluate.gpu.hopper import libcuda

    lib = libcuda()
    if not hasattr(lib, "_fastcall"):
        vp = ctypes.c_void_p
        lib.cuMemsetD8Async.argtypes = [vp, ctypes.c_ubyte, ctypes.c_size_t, vp]
        lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(vp)]
        lib.cuCtxSetCurrent.argtypes = [vp]
        lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(vp), ctypes.c_int]
        lib._fastcall = True
    return lib


def check_result(result: int, call: str) -> None:
    from evolve.evaluate.gpu.hopper import DriverError, check_result

    try:
        check_result(result, call)
    except DriverError as exc:
        raise RuntimeError(str(exc)) from None
