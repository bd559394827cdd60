"""best.py's fast PyTorch path and ModelNew without a GPU: each launch's kernelParams packed as the
compiled cubin declares its parameters (real NVRTC compiles), the geometry a shape fixes, the
custom op's schema, and ModelNew's constructor, parameters and state_dict (launches:
tests/test_gpu_usage.py)."""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from evolve.bench.overhead import table
from evolve.bench.report import markdown
from evolve.evaluate.plan import Call, LaunchPlan, make_plan, param_mismatch
from evolve.hardware import catalog
from evolve.kernel.compiler import compile_cuda
from evolve.kernel.cubin import inspect as inspect_cubin
from evolve.kernel.spec import Variant
from evolve.results.bestpy import op_schema
from evolve.results.fastcall import Packed, geometry
from evolve.results.modelnew import module_spec
from evolve.task.task import Task, load_task
from tests.helpers.runs import import_file, write_best
from tests.helpers.tasks import task

H200 = catalog()["h200"][0]


def _plan(t: Task, v: Variant, cfg: dict[str, int]) -> Callable[[dict[str, int]], LaunchPlan]:
    return lambda sizes: make_plan(v.spec, t, sizes, cfg, H200)


@pytest.mark.parametrize(("name", "seed", "sizes"), [("reduce_sum", 1, {"n": 1_000_003}),
                                                     ("layernorm", 0, {"rows": 7, "cols": 33}),
                                                     ("softmax", 0, {"rows": 3, "cols": 1000})])
def test_kernel_params_are_packed_as_the_cubin_declares_them(name: str, seed: int, sizes: dict) -> None:
    t = task(name)
    v = t.seeds()[seed]
    cfg = dict(v.spec.default)
    info = inspect_cubin(compile_cuda(v.with_defines(cfg, t.defines), {}, "sm_90").cubin)
    plan = make_plan(v.spec, t, sizes, cfg, H200)
    assert param_mismatch(plan, info) is None  # the evaluator's own check of the same layout
    slots = {a.name: i for i, a in enumerate(t.args)}
    pointers = [0x7F00_0000_0000 + 0x1000 * i for i in range(len(t.args))]
    fixed = {s.name: 0x7E00_0000_0000 + 0x100 * i for i, s in enumerate(plan.scratch)}
    for call in plan.calls:
        packed = Packed(call, slots, fixed)
        packed.write(pointers)
        declared = info.params[call.kernel]
        assert len(packed.holders) == len(declared) == len(call.args)
        for i, ((kind, value), param) in enumerate(zip(call.args, declared, strict=True)):
            assert ctypes.sizeof(packed.holders[i]) == param.size, (call.kernel, i)
            want = (struct.pack("<q", pointers[slots[value]] if value in slots else fixed[value])
                    if kind == "buffer" else struct.pack("<i", value))
            assert ctypes.string_at(packed.params[i], param.size) == want, (call.kernel, i)
    if name == "reduce_sum":  # two kernels and a scratch buffer between them
        assert len(plan.calls) == 2 and [s.name for s in plan.scratch] == ["partial"]


def test_new_pointers_are_written_into_the_same_array() -> None:
    packed = Packed(Call("k", (1, 1, 1), (1, 1, 1), 0, (("buffer", "x"), ("int32", -5), ("buffer", "y"))),
                    {"x": 1, "y": 0}, {})
    array = ctypes.addressof(packed.params)
    for ptrs in ([16, 32], [2**48, 2**47]):
        packed.write(ptrs)
        assert ctypes.addressof(packed.params) == array  # built once: a graph captured it by value
        assert [ctypes.c_void_p.from_address(packed.params[i]).value for i in (0, 2)] == [ptrs[1], ptrs[0]]
    assert ctypes.c_int32.from_address(packed.params[1]).value == -5
    with pytest.raises(ValueError, match="a tensor_map argument is not launched by pointer"):
        Packed(Call("k", (1, 1, 1), (1, 1, 1), 0, (("tensor_map", "m"),)), {}, {})


def test_a_shape_fixes_the_sizes_the_plan_and_the_outputs_to_allocate() -> None:
    t = task("reduce_sum")
    v = t.seeds()[1]
    geo = geometry(t, [(4099,), None], {}, _plan(t, v, dict(v.spec.default)))
    assert geo.sizes == {"n": 4099} and geo.outputs == ((1, (1,), "float32"),)
    assert geo.plan == make_plan(v.spec, t, {"n": 4099}, dict(v.spec.default), H200)
    assert geometry(t, [(4099,), (1,)], {}, _plan(t, v, dict(v.spec.default))).outputs == ()  # given
    ln = task("layernorm")
    seed = ln.seeds()[0]
    with pytest.raises(ValueError, match=r"gamma has cols = 6 but another argument .* says cols = 5"):
        geometry(ln, [(3, 5), (6,), (5,), None], {}, _plan(ln, seed, dict(seed.spec.default)))
    with pytest.raises(ValueError, match=r"^layernorm: y has rows = 5 but another argument"):
        geometry(ln, [(3, 5), (5,), (5,), (5, 3)], {}, _plan(ln, seed, dict(seed.spec.default)))


def test_the_op_schema_holds_no_text_of_the_task() -> None:
    base = dict(task("layernorm").config)
    args = {"x) -> Tensor; evil(Tensor": base["args"]["x"], **{k: v for k, v in base["args"].items()
                                                                if k != "x"}}
    schema, mutated = op_schema(load_task({**base, "stress": None, "args": args}, resolve=False), [])
    assert schema == "(Tensor arg0, Tensor gamma, Tensor beta) -> Tensor" and mutated == ()


LN_MODULE = {"init": [{"name": "normalized_shape", "size": "cols"}, {"name": "eps", "value": 1.0e-5}],
             "forward": ["x"], "parameters": {"gamma": "weight", "beta": "bias"}}


def test_model_new_takes_the_model_s_constructor_and_state_dict(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    t = load_task({**dict(task("layernorm").config), "module": LN_MODULE})
    best = import_file(write_best(t, tmp_path / "ln"), "best_ln_module")
    assert str(inspect.signature(best.ModelNew)) == "(normalized_shape, eps=1e-05)"
    model = torch.nn.LayerNorm(256)
    with torch.no_grad():
        model.weight.uniform_()
        model.bias.uniform_()
    new = best.ModelNew(256)
    new.load_state_dict(model.state_dict())  # strict: the same keys and shapes
    assert torch.equal(new.weight, model.weight) and torch.equal(new.bias, model.bias)
    assert isinstance(new.weight, torch.nn.Parameter) and not new.weight.requires_grad
    with pytest.raises(ValueError, match=r"^ModelNew of layernorm was tuned for eps=1e-05, got 0.001$"):
        best.ModelNew(256, eps=1e-3)
    with pytest.raises(TypeError, match=r"ModelNew\(normalized_shape, eps=1e-05\): missing a required"):
        best.ModelNew()
    with pytest.raises(TypeError, match=r"^ModelNew.forward takes 1 inputs \(x\), got 2$"):
        new(torch.zeros(2, 256), torch.zeros(2, 256))
    with pytest.raises(ValueError, match=r"^a tensor on cpu cannot be launched on"):
        new(torch.zeros(2, 256))
    nested = load_task({**dict(task("layernorm").config), "module": {
        **LN_MODULE, "parameters": {"gamma": "norm.weight", "beta": "norm.bias"}}})
    block = import_file(write_best(nested, tmp_path / "n"), "best_ln_nested").ModelNew(8)
    assert set(block.state_dict()) == {"norm.weight", "norm.bias"}


def test_a_task_without_a_module_entry_forwards_its_inputs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "best_ln_plain_module")
    assert str(inspect.signature(best.ModelNew)) == "()" and not list(best.ModelNew().parameters())
    assert module_spec(task("layernorm")).forward == ("x", "gamma", "beta")


@pytest.mark.parametrize(("module", "error"), [
    ({"forward": ["x"]}, r"must name each input \(x, gamma, beta\) once, got x"),
    ({**LN_MODULE, "parameters": {"gamma": "weight", "beta": "bias; import os"}}, "is not a state_dict key"),
    ({**LN_MODULE, "init": [{"name": "features", "size": "width"}]}, "gives size 'width', not one of rows"),
    ({**LN_MODULE, "init": [{"name": "class", "value": 1}]}, r"module.init entries are"),
    ({**LN_MODULE, "forward": ["x"], "extra": 1}, "module must be a mapping of init, forward and parameters"),
])
def test_a_module_entry_that_cannot_be_a_model_new_is_one_line(module: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        module_spec(load_task({**dict(task("layernorm").config), "module": module}, resolve=False))


def test_model_new_compiles_into_one_graph_through_its_custom_op(tmp_path: Path) -> None:
    """Traced on meta tensors (the op's fake implementation): no GPU needed to see the graph."""
    torch = pytest.importorskip("torch")
    t = load_task({**dict(task("layernorm").config), "module": LN_MODULE})
    best = import_file(write_best(t, tmp_path / "ln"), "best_ln_compile")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(64, 64)
            self.norm = best.ModelNew(64)

        def forward(self, x):
            return self.norm(torch.relu(self.fc(x))) * 2

    block = Block().to("meta")
    x = torch.empty(8, 64, device="meta")
    torch._dynamo.reset()
    explained = torch._dynamo.explain(block)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    y = torch.compile(block, fullgraph=True, backend="eager")(x)
    assert y.shape == (8, 64) and y.device.type == "meta"
    again = import_file(write_best(t, tmp_path / "again"), "best_ln_compile_again")  # the same kernel
    assert again.ModelNew(64)._op is block.norm._op


def test_the_bench_s_overhead_table_and_its_section(tmp_path: Path) -> None:
    rows = [{"task": "softmax", "size": "rows=64,cols=1024", "implementation": impl, "host_us": host,
             "wall_us": host + 1, "over_torch_us": host - 8.0, "vs_torch": host / 8.0, "launches": n,
             "launcher": "native"}
            for impl, host, n in [("torch", 8.0, 1), ("ModelNew", 11.5, 2)]]
    text = table(rows)
    assert "| softmax | rows=64,cols=1024 | ModelNew | native | 2 | 11.5 | 12.5 | +3.5 | 1.44x |" in text
    assert "| softmax | rows=64,cols=1024 | torch |  | 1 |" in text
    md = markdown({"overhead": {"rows": rows, "table": text}})
    assert "## Call overhead from PyTorch" in md and text in md
    if shutil.which("nvidia-smi"):
        return  # the section would run
    out = subprocess.run([sys.executable, "-m", "evolve.bench", "sections=[overhead]", f"out={tmp_path}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "need an NVIDIA GPU" in out.stderr and "Traceback" not in out.stderr


def test_positional_tensors_go_straight_to_the_fast_path(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's call (tensors in the task's order, outputs also by name) skips the general argument
    handling (issue 26: its cost was most of best.py's per-call overhead), launching the same list."""
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "best_ln_direct")
    k = best.kernel
    launched: list[list] = []
    monkeypatch.setattr(k, "launch_torch", lambda values, sizes: launched.append([*values]) or
                        [*values[:3], torch.zeros(1)])
    general = k._arguments
    took: list[int] = []
    monkeypatch.setattr(k, "_arguments", lambda *a: took.append(1) or general(*a))
    x, g, b, y = torch.randn(2, 8), torch.randn(8), torch.randn(8), torch.empty(2, 8)
    best.layernorm(x, g, b)
    best.layernorm(x, g, b, y)
    best.layernorm(x, g, b, y=y)  # an output by name too
    assert not took, "tensors alone took the general path"
    best.layernorm(x, g, b, y=None)  # anything else: the general path, to the same launch
    assert took and launched == [[x, g, b, None], *[[x, g, b, y]] * 2, [x, g, b, None]]
    with pytest.raises(TypeError, match="needs beta"):
        best.layernorm(x, g)


def test_model_new_launches_through_autograd_only_when_an_input_requires_a_gradient(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Else its output would silently carry no gradient; through the op a backward fails in one line."""
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "best_ln_grad")
    new = best.ModelNew()
    way: list[str] = []
    monkeypatch.setattr(best.kernel, "launch_torch", lambda values, sizes: way.append("direct") or
                        [*values[:3], torch.zeros(1)])
    monkeypatch.setattr(new, "_op", lambda *values: way.append("op") or torch.zeros(1))
    x, g, b = torch.randn(2, 8), torch.randn(8), torch.randn(8)
    new(x, g, b)
    new(x.requires_grad_(), g, b)
    with torch.no_grad():
        new(x, g, b)
    assert way == ["direct", "op", "direct"]


@pytest.fixture
def fake_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """tests/helpers/fake_driver.c compiled and put where fastcall finds libcuda."""
    from evolve.evaluate.gpu import hopper
    from evolve.results import fastcall

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in driver")
    lib = tmp_path / "libfakecuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib),
                    str(Path(__file__).parents[1] / "helpers" / "fake_driver.c")], check=True)
    fake = ctypes.CDLL(str(lib))
    monkeypatch.setattr(hopper, "libcuda", lambda: fake)
    fastcall._driver.cache_clear()
    fastcall.launch_ex.cache_clear()
    yield fake
    fastcall._driver.cache_clear()
    fastcall.launch_ex.cache_clear()


def test_a_launch_passes_what_the_plan_says_in_the_module_s_context(fake_driver) -> None:
    """The launch call's arguments are made once per shape as ctypes values (no conversion per
    call): what the driver receives must still be the plan's grid, block, shared bytes, stream and
    kernelParams, in the module's context, and the caller's context restored after."""
    from evolve.results import fastcall

    t = task("vector_add")
    v = next(s for s in t.seeds() if s.name == "naive")
    call = _plan(t, v, v.spec.default)({"n": 1_000_003}).calls[0]
    slots = {a.name: i for i, a in enumerate(t.args)}
    one = fastcall.Launch(0xF00D, call, Packed(call, slots, {}), 0x5EED)
    prepared = fastcall._Prepared(None, [one], [], 0x2000, [], [])
    seen = (ctypes.c_uint64 * 16).in_dll(fake_driver, "seen")
    for pointers in ([0xA0, 0xB0, 0xC0], [2**47 + 16, 0xB0, 0xC0]):
        fastcall.launch(prepared, pointers, 0x5EED, ctypes.c_void_p())
        assert list(seen[:12]) == [0xF00D, *call.grid, *call.block, call.shared, 0x5EED, pointers[0],
                                   1_000_003, 0], list(seen[:12])
        assert seen[12] == 0x2000 and seen[13] == 0  # in the module's context; no cluster attribute
    assert ctypes.c_int.in_dll(fake_driver, "launches").value == 2
    clustered = dataclasses.replace(call, grid=(8, 1, 1), cluster=(2, 1, 1))
    fastcall.launch(fastcall._Prepared(None, [fastcall.Launch(0xF00D, clustered, Packed(clustered, slots, {}),
                                                               0x5EED)], [], 0x2000, [], []),
                    [0xA0, 0xB0, 0xC0], 0x5EED, ctypes.c_void_p())
    assert list(seen[1:4]) == [8, 1, 1] and seen[13] == 1  # the cluster as the launch's one attribute
    current = ctypes.c_void_p()
    fake_driver.cuCtxGetCurrent(ctypes.byref(current))
    assert current.value == 0x1000  # the caller's context again


class _Tensor:
    """What the fast path reads of a CUDA tensor, for a test without a GPU."""

    def __init__(self, shape: tuple[int, ...], dtype: object, pointer: int) -> None:
        self.shape, self.dtype, self._pointer = shape, dtype, pointer

    def get_device(self) -> int:
        return 0

    def is_contiguous(self) -> bool:
        return True

    def data_ptr(self) -> int:
        return self._pointer


def test_a_call_on_the_fast_path_launches_with_its_own_pointers_in_the_module_s_context(fake_driver) -> None:
    """TorchPath's call, the per-shape cache hit included, gives the driver each call's pointers on
    the current stream in the module's context, whether that context is current (the launch
    made at once) or not (another one, or none: the launch the driver refuses is made again in
    the module's context, and the caller's restored)."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from evolve.results import fastcall

    t = task("vector_add")
    v = next(s for s in t.seeds() if s.name == "naive")
    plan = _plan(t, v, v.spec.default)
    loaded = SimpleNamespace(functions={c.kernel: SimpleNamespace(ptr=0xF00D) for c in plan({"n": 8}).calls})
    path = fastcall.TorchPath(t, lambda device, sizes: (loaded, plan(sizes)))
    path._stream = lambda device: 0x5EED
    seen = (ctypes.c_uint64 * 16).in_dll(fake_driver, "seen")
    count = ctypes.c_int.in_dll(fake_driver, "launches")
    current = ctypes.c_void_p()
    ctypes.c_void_p.in_dll(fake_driver, "module_ctx").value = 0x2000  # launches elsewhere fail
    for ctx in (0x2000, 0x1000, 0):  # the primary context current, another one, none
        fake_driver.cuCtxSetCurrent(ctypes.c_void_p(ctx))
        for base in (0xA000, 0xB000):
            values = [_Tensor((1000,), torch.float32, base + 0x100 * i) for i in range(len(t.args))]
            before = count.value
            assert path(values, {}, lambda values: None) is values
            assert count.value == before + 1
            assert seen[0] == 0xF00D and seen[8] == 0x5EED and seen[9] == base and seen[10] == 1000
            assert seen[12] == 0x2000  # launched in the module's context ...
            fake_driver.cuCtxGetCurrent(ctypes.byref(current))
            assert (current.value or 0) == ctx  # ... and the caller's current again
    assert len(path._cache) == 1
