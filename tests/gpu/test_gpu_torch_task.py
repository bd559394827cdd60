"""A task made from a PyTorch problem file, on the GPU: its reference (the Model in float64) runs on
the GPU in the worker and leaves nothing in PyTorch's memory; a kernel written for it is judged
right and a wrong one wrong by the worker; the kernel's ModelNew equals the Model it replaces (two
outputs and a 0-d one too, in a CUDA graph and compiled) and costs at most 1.5x its call."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from evolve.evaluate.cupy_backend import CupyBackend
from evolve.evaluate.measurement import Measurement, Status
from evolve.task.task import Task, load_task
from tests.helpers.runs import import_file, write_best

torch = pytest.importorskip("torch")
cp = pytest.importorskip("cupy")

from evolve.task.torch_task import task_config  # noqa: E402

PROBLEMS = Path(__file__).parents[1] / "torch_problems"


def _problem(stem: str) -> ModuleType:
    """The problem file as a user's script imports it."""
    spec = importlib.util.spec_from_file_location(f"gpu_problem_{stem}", PROBLEMS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    return problem


def _task(stem: str) -> Task:
    """The task made from the problem file, with the kernel written here for it as its seed."""
    cfg = task_config(PROBLEMS / f"{stem}.py")
    return load_task({**cfg, "seeds": [str(PROBLEMS / "kernels" / f"{stem}.cu")]})


def _judged(task: Task, *tunables: dict[str, int]) -> list[Measurement]:
    """The worker's measurement of the seed at each of ``tunables``, at the timing sizes."""
    (seed,) = task.seeds()
    backend = CupyBackend({"timeout_s": 120, "timing": {}})
    try:
        backend.start(task, None)
        return [backend.evaluate(seed, t, task.timing_sizes) for t in tunables]
    finally:
        backend.close()


def test_the_reference_runs_on_the_gpu_and_releases_its_memory() -> None:
    task = load_task(task_config(PROBLEMS / "linear_relu.py"))
    for sizes in (task.correctness_sizes[1], task.timing_sizes[0]):
        x = task.make_inputs(cp, sizes, 5)
        torch._C._cuda_clearCublasWorkspaces()  # what earlier tests of this process left: the
        torch.cuda.empty_cache()  # reference clears cuBLAS's workspaces (33 MiB) too, and the cache
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        got = task.expected(cp, x, sizes)["out"]
        assert isinstance(got, cp.ndarray) and got.dtype == cp.float64
        assert torch.cuda.max_memory_allocated() > allocated  # it ran on the GPU ...
        assert torch.cuda.memory_allocated() == allocated  # ... and left nothing there
        assert torch.cuda.memory_reserved() <= reserved
        host = task.expected(np, {k: cp.asnumpy(v) for k, v in x.items()}, sizes)["out"]
        np.testing.assert_allclose(cp.asnumpy(got), host, rtol=1e-10, atol=1e-10)


def test_a_kernel_for_a_problem_file_is_judged_and_its_model_new_equals_the_model(tmp_path: Path) -> None:
    task = _task("row_sum")
    right, wrong = _judged(task, {"BLOCK": 128, "WRONG": 0}, {"BLOCK": 128, "WRONG": 1})
    assert right.status is Status.OK, right.reason
    assert wrong.status is Status.WRONG, wrong.reason
    best = import_file(write_best(task, tmp_path / "best", {"BLOCK": 256, "WRONG": 0}), "gpu_best_row_sum")
    problem = _problem("row_sum")
    model = problem.Model(*problem.get_init_inputs()).cuda()
    new = best.ModelNew(*problem.get_init_inputs()).cuda()
    for rows, cols in ((1, 1), (3, 1000), (512, 1000), (77, 4099)):
        x = torch.randn(rows, cols, device="cuda")
        torch.testing.assert_close(new(x), model(x), atol=1e-4, rtol=1e-5)


@pytest.mark.timing
def test_a_problem_file_s_model_new_costs_at_most_the_bound_beside_its_model(tmp_path: Path) -> None:
    """A call of ModelNew (the module a user swaps in) beside the Model's own forward, interleaved
    in one run: at most 1.5x, as for the tasks written by hand (tests/gpu/test_gpu_usage.py)."""
    from evolve.bench.overhead import per_call
    from tests.gpu.test_gpu_usage import BOUND

    task = _task("row_sum")
    best = import_file(write_best(task, tmp_path / "b", {"BLOCK": 256, "WRONG": 0}), "gpu_best_row_sum_cost")
    problem = _problem("row_sum")
    model = problem.Model(*problem.get_init_inputs()).cuda()
    new = best.ModelNew(*problem.get_init_inputs()).cuda()
    x = torch.randn(64, 1000, device="cuda")
    torch.testing.assert_close(new(x), model(x), atol=1e-4, rtol=1e-5)
    figures = {name: host for name, (host, _) in per_call({"Model": lambda: model(x),
                                                           "ModelNew": lambda: new(x)}, 2000).items()}
    assert figures["ModelNew"] <= BOUND * figures["Model"], figures


def test_a_number_among_the_forward_s_arguments_is_the_kernel_s_constant(tmp_path: Path) -> None:
    """get_inputs() gives a tensor and a float: the float is frozen into the task (no kernel
    argument), the kernel built with it is judged against the Model called with it, and ModelNew
    takes it where the Model does and refuses another value."""
    task = _task("scaled_by_number")
    right, wrong = _judged(task, {"BLOCK": 256, "WRONG": 0}, {"BLOCK": 256, "WRONG": 1})
    assert right.status is Status.OK, right.reason
    assert wrong.status is Status.WRONG, wrong.reason
    best = import_file(write_best(task, tmp_path / "best", {"BLOCK": 128, "WRONG": 0}), "gpu_best_scaled")
    new = best.ModelNew().cuda()
    a = torch.randn(33, 77, device="cuda")
    torch.testing.assert_close(new(a, 2.5), a * 2.5 + 1.0)
    with pytest.raises(ValueError, match=r"was tuned for s=2.5, got 3.0$"):
        new(a, 3.0)


@pytest.mark.parametrize(("stem", "tunables"), [("row_max", {"BLOCK": 64}),
                                               ("cross_entropy", {"BLOCK": 128})])
def test_two_outputs_and_a_0_d_output_judged_equal_captured_and_compiled(tmp_path: Path, stem: str,
                                                                         tunables: dict[str, int]) -> None:
    """torch.max's (values, int64 indices) and a mean loss of shape (): the worker judges the kernel
    right, ModelNew returns what the Model does at awkward shapes, in a CUDA graph and compiled."""
    task = _task(stem)
    (judged,) = _judged(task, tunables)
    assert judged.status is Status.OK, judged.reason
    best = import_file(write_best(task, tmp_path / "b", tunables), f"gpu_best_{stem}_outs")
    model, new = _problem(stem).Model().cuda(), best.ModelNew().cuda()

    def inputs(rows: int, cols: int) -> list[torch.Tensor]:
        x = torch.randn(rows, cols, device="cuda") * 4
        return [x] if stem == "row_max" else [x, torch.randint(0, cols, (rows,), device="cuda")]

    for rows, cols in ((1, 1), (3, 1000), (77, 4099), (1024, 100)):
        given = inputs(rows, cols)
        torch.testing.assert_close(new(*given), model(*given), atol=1e-5, rtol=1e-5)
    given = inputs(300, 700)
    new(*given)  # the shape prepared before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = new(*given)
    for _ in range(2):
        for t, fresh in zip(given, inputs(300, 700), strict=True):
            t.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, model(*given), atol=1e-5, rtol=1e-5)
    compiled = torch.compile(lambda *a: new(*a), fullgraph=True)
    torch.testing.assert_close(compiled(*given), model(*given), atol=1e-5, rtol=1e-5)
