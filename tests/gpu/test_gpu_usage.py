"""best.py on the GPU (pytest -m gpu): the winner launched on CuPy arrays and PyTorch tensors at
sizes the search never saw, on PyTorch's current stream, bfloat16 and inout arguments, clear
errors, the torch.library op inside torch.compile, a PyTorch module's function replaced, and
ModelNew: equal to the Model, a call at most 1.5x the torch op it replaces, captured in a CUDA
graph (with a two-kernel plan and its scratch), compiled without a graph break."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from evolve.results import native
from evolve.task.correctness import compare
from evolve.task.files import read_task_file
from evolve.task.task import Task, load_task
from tests.helpers.runs import import_file, write_best
from tests.helpers.tasks import OWN, task


def own(name: str) -> Task:
    return load_task(read_task_file(OWN / name / f"{name}.yaml"))


def test_cupy_arrays_at_sizes_the_search_never_saw(tmp_path: Path) -> None:
    import cupy as cp

    t = task("layernorm")
    best = import_file(write_best(t, tmp_path / "ln"), "gpu_best_ln")
    for rows, cols in [(1, 1), (100, 777), (33, 4096), (5, 20000)]:
        x = cp.random.standard_normal((rows, cols), dtype=cp.float32) * 3 + 1
        g = cp.random.standard_normal(cols, dtype=cp.float32)
        b = cp.random.standard_normal(cols, dtype=cp.float32)
        y = best.layernorm(x, g, b)
        ref = t.expected(cp, {"x": x, "gamma": g, "beta": b}, {"rows": rows, "cols": cols})["y"]
        assert compare(cp, "y", y, ref, t.tolerance) is None, (rows, cols)
        into = cp.full_like(x, cp.nan)
        assert best.layernorm(x, g, b, y=into) is into
        assert compare(cp, "y", into, ref, t.tolerance) is None


def test_torch_tensors_on_a_side_stream(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    t = task("layernorm")
    best = import_file(write_best(t, tmp_path / "ln"), "gpu_best_ln_torch")
    x = torch.randn(300, 1000, device="cuda") * 2 - 1
    g, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = best.layernorm(x, g, b)
    side.synchronize()
    want = torch.nn.functional.layer_norm(x.double(), (1000,), g.double(), b.double(), eps=1e-5)
    torch.testing.assert_close(y.double(), want, atol=1e-4, rtol=1e-4)


def test_a_call_from_a_thread_where_no_context_is_current(tmp_path: Path) -> None:
    """The fast path launches without asking for the current context: in a new thread (none is
    current there) the driver refuses the first launch and it is made again in the module's."""
    import threading

    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "gpu_best_ln_thread")
    x = torch.randn(64, 512, device="cuda")
    g, b = torch.randn(512, device="cuda"), torch.randn(512, device="cuda")
    y = torch.empty_like(x)
    best.layernorm(x, g, b, y=y)  # the shape prepared on this thread
    torch.cuda.synchronize()
    y.zero_()
    got: list = []  # y given: no PyTorch allocation makes a context current in the thread first
    thread = threading.Thread(target=lambda: got.append(best.layernorm(x, g, b, y=y)))
    thread.start()
    thread.join()
    torch.cuda.synchronize()
    want = torch.nn.functional.layer_norm(x.double(), (512,), g.double(), b.double(), eps=1e-5)
    torch.testing.assert_close(got[0].double(), want, atol=1e-4, rtol=1e-4)


def test_bfloat16_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    t = own("bf16_rmsnorm")
    best = import_file(write_best(t, tmp_path / "rms"), "gpu_best_rms")
    x = torch.randn(64, 3000, device="cuda", dtype=torch.bfloat16)
    w = (torch.rand(3000, device="cuda") + 0.5).to(torch.bfloat16)
    y = best.bf16_rmsnorm(x, w)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    xd = x.double()
    want = (xd / torch.sqrt((xd * xd).mean(1, keepdim=True) + 1e-6) * w.double()).cpu().numpy()
    bits = y.view(torch.int16).cpu().numpy().view(np.uint16)
    assert compare(np, "y", bits, want, t.tolerance_for(t.outputs[0]), np.nan, "bfloat16") is None


def test_an_inout_tensor_is_updated_in_place(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = import_file(write_best(own("histogram"), tmp_path / "h"), "gpu_best_hist")
    values = torch.randint(0, 300, (1_000_003,), device="cuda", dtype=torch.int32)
    counts = torch.randint(0, 50, (300,), device="cuda", dtype=torch.int32)
    before = counts.clone()
    assert best.histogram(values, counts) is counts
    assert torch.equal(counts, before + torch.bincount(values, minlength=300).to(torch.int32))


def test_integer_outputs_from_cupy(tmp_path: Path) -> None:
    import cupy as cp

    best = import_file(write_best(own("row_argmax"), tmp_path / "a"), "gpu_best_argmax")
    x = cp.floor(cp.random.standard_normal((777, 123), dtype=cp.float32) * 2)  # ties
    idx = best.row_argmax(x)
    assert idx.dtype == cp.int32 and cp.array_equal(idx, cp.argmax(x, axis=1).astype(cp.int32))


def test_what_cannot_be_launched_is_one_clear_error(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "gpu_best_ln_err")
    x, g = torch.randn(4, 6, device="cuda"), torch.randn(6, device="cuda")
    best.layernorm(x, g, g)  # this shape is cached now: what the checks refuse must still be refused
    with pytest.raises(TypeError, match="x must be float32, got float64"):
        best.layernorm(x.double(), g, g)
    with pytest.raises(ValueError, match="gamma must be contiguous"):
        best.layernorm(x, torch.randn(12, device="cuda")[::2], g)
    with pytest.raises(ValueError, match="gamma has cols = 5"):
        best.layernorm(x, g[:5], g)
    wide = torch.randn(4, 12, device="cuda")
    with pytest.raises(ValueError, match="x must be contiguous"):
        best.layernorm(wide[:, ::2], g, g)
    with pytest.raises(ValueError, match="a tensor on cpu cannot be launched on"):
        best.layernorm(x.cpu(), g.cpu(), g.cpu())


def test_the_torch_op_runs_inside_torch_compile(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "gpu_best_ln_op")
    op = best.register_torch_op("evolve_gpu_test")
    x = torch.randn(64, 512, device="cuda")
    g, b = torch.randn(512, device="cuda"), torch.randn(512, device="cuda")
    y = op(x, g, b)
    want = torch.nn.functional.layer_norm(x, (512,), g, b, eps=1e-5)
    torch.testing.assert_close(y, want, atol=1e-4, rtol=1e-4)
    compiled = torch.compile(lambda x: op(x * 2, g, b) + 1, fullgraph=True)
    torch.testing.assert_close(compiled(x), op(x * 2, g, b) + 1)


def test_a_module_function_replaced_by_the_tuned_kernel(tmp_path: Path) -> None:
    """A model's layer norm replaced by the tuned kernel (docs/own-task.md does it with SwiGLU), the output
    checked."""
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "gpu_best_ln_model")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(256, 256)
            self.norm = torch.nn.LayerNorm(256)

        def forward(self, x):
            return self.norm(torch.relu(self.fc(x)))

    model = Block().cuda()
    x = torch.randn(64, 256, device="cuda")
    want = model(x)
    model.norm.forward = lambda h: best.layernorm(h.contiguous(), model.norm.weight, model.norm.bias)
    torch.testing.assert_close(model(x), want, atol=1e-4, rtol=1e-4)


def _ln_module(tmp_path: Path, name: str) -> ModuleType:
    from tests.results.test_usage_fastcall import LN_MODULE

    return import_file(write_best(load_task({**dict(task("layernorm").config), "module": LN_MODULE}),
                                  tmp_path / name), name)


def test_model_new_equals_the_model_it_replaces(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = _ln_module(tmp_path, "gpu_best_ln_modelnew")
    model = torch.nn.LayerNorm(768).cuda()
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
    new = best.ModelNew(768).cuda()
    new.load_state_dict(model.state_dict())
    for rows in (1, 7, 4096):
        x = torch.randn(rows, 768, device="cuda") * 3 + 1
        torch.testing.assert_close(new(x), model(x), atol=1e-4, rtol=1e-4)


def test_a_multi_kernel_plan_with_scratch_on_tensors_and_one_plan_per_shape(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("reduce_sum"), tmp_path / "r", seed=1), "gpu_best_sum_fast")
    for n in (1, 37, 4099, 1_000_003, 37, 4099):
        x = torch.rand(n, device="cuda", dtype=torch.float64).float() + 1
        torch.testing.assert_close(best.reduce_sum(x)[0].double(), x.double().sum(), rtol=1e-4, atol=0)
    assert best.kernel.torch_path().cached == 4  # per shape (and stream), made once


# The bound of issue 26: 15 µs per call where a torch op costs 10 µs (the host it was set on), i.e.
# at most 1.5x the torch op that the kernel replaces, timed side by side in one run (this host's
# speed varies by a third from run to run, its torch ops taking 11 to 18 µs).
BOUND = 1.5


@pytest.mark.timing
def test_a_call_costs_at_most_the_bound_beside_the_torch_op(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from evolve.bench.overhead import per_call

    best = _ln_module(tmp_path, "gpu_best_ln_overhead")
    x = torch.randn(1, 256, device="cuda")
    g, b = torch.randn(256, device="cuda"), torch.randn(256, device="cuda")
    y = torch.empty(1, 256, device="cuda")
    new = best.ModelNew(256).cuda()
    op = best.register_torch_op("evolve_overhead_test")
    figures = {name: host for name, (host, _) in per_call({
        "F.layer_norm": lambda: torch.nn.functional.layer_norm(x, (256,), g, b),
        "best.py": lambda: best.layernorm(x, g, b),
        "best.py into y": lambda: best.layernorm(x, g, b, y=y),
        "ModelNew": lambda: new(x),
        "custom op": lambda: op(x, g, b)}, 2000).items()}
    assert all(us <= BOUND * figures["F.layer_norm"] for us in figures.values()), figures


def test_calls_are_captured_in_a_cuda_graph(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    summed = import_file(write_best(task("reduce_sum"), tmp_path / "r", seed=1), "gpu_best_sum_graph")
    ln = _ln_module(tmp_path, "gpu_best_ln_graph")
    new = ln.ModelNew(512).cuda()
    x, v = torch.randn(64, 512, device="cuda"), torch.rand(1_000_003, device="cuda") + 1
    out = torch.empty(1, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: compile, load, plan
        new(x)
        summed.reduce_sum(v, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = new(x)
        summed.reduce_sum(v, out=out)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        v.copy_(torch.rand_like(v) + 1)
        graph.replay()
        torch.cuda.synchronize()
        want = torch.nn.functional.layer_norm(x, (512,), new.weight, new.bias, eps=1e-5)
        torch.testing.assert_close(y, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(out[0].double(), v.double().sum(), rtol=1e-4, atol=0)


def test_model_new_in_torch_compile_has_no_graph_break(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = _ln_module(tmp_path, "gpu_best_ln_compile")

    class Block(torch.nn.Module):
        def __init__(self, norm: torch.nn.Module) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(256, 256)
            self.norm = norm

        def forward(self, x):
            return self.norm(torch.relu(self.fc(x))) * 2

    model = Block(torch.nn.LayerNorm(256)).cuda()
    new = Block(best.ModelNew(256)).cuda()
    new.load_state_dict(model.state_dict())
    x = torch.randn(64, 256, device="cuda")
    compiled = torch.compile(new, fullgraph=True)  # a graph break is an error
    torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert torch._dynamo.explain(new)(x).graph_break_count == 0


@pytest.mark.timing
def test_the_bench_measures_call_overhead_side_by_side(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from evolve.bench.overhead import call_overhead

    res = call_overhead(["softmax", "reduce_sum"], {"softmax": [{"rows": 64, "cols": 1024}],
                                                    "reduce_sum": [{"n": 4096}]}, tmp_path, 200)
    rows = {(r["task"], r["implementation"]): r for r in res["rows"]}
    both = native.extension() is not None  # the ctypes path is timed beside the native one
    assert {i for _, i in rows} == {"torch", "torch module", "best.py", "ModelNew", "custom op", "one launch",
                                    *(["best.py, ctypes"] if both else [])}
    assert len(rows) == (14 if both else 12) and rows[("reduce_sum", "best.py")]["launches"] == 2
    assert all(0 < r["host_us"] <= r["wall_us"] * 1.5 for r in res["rows"])
    for (name, impl), r in rows.items():
        peer = {"best.py": "torch", "ModelNew": "torch module"}.get(impl)
        if peer:  # the bound beyond the launches a plan of several kernels makes
            more = (r["launches"] - 1) * rows[(name, "one launch")]["host_us"]
            assert r["host_us"] <= BOUND * rows[(name, peer)]["host_us"] + more, res["table"]


def test_a_backward_through_model_new_fails_in_one_line(tmp_path: Path) -> None:
    """In grad mode with an input that requires a gradient, ModelNew computes the forward and a
    backward through it is refused (not run on the H200 yet: added after the session's last run)."""
    torch = pytest.importorskip("torch")
    best = _ln_module(tmp_path, "gpu_best_ln_backward")
    new = best.ModelNew(256).cuda()
    x = torch.randn(4, 256, device="cuda", requires_grad=True)
    y = new(x)
    want = torch.nn.functional.layer_norm(x.detach(), (256,), new.weight, new.bias, eps=1e-5)
    torch.testing.assert_close(y.detach(), want, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="has no backward"):
        y.sum().backward()
