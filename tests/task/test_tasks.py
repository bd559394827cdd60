import dataclasses

import numpy as np
import pytest

from evolve import dtypes
from evolve.errors import EvolveError, SpecError
from evolve.evaluate.plan import make_plan
from evolve.hardware import named
from evolve.task.correctness import admit, compare, trivial_outputs, unwritten_fill
from evolve.task.task import Tolerance, load_task
from tests.helpers.tasks import TASKS, hardware_config, task, task_config

H200 = named(hardware_config("h200"))


def test_all_six_builtin_tasks_exist() -> None:
    assert set(TASKS) >= {"vector_add", "reduce_sum", "softmax", "layernorm", "transpose", "sgemm"}


@pytest.mark.parametrize("name", TASKS)
def test_task_is_admitted_and_has_two_seeds(name: str) -> None:
    t = task(name)
    admit(t)  # trivial kernels fail its check
    assert len(t.seeds()) >= 2
    assert any(min(s.values()) == 1 or any(v % 2 for v in s.values()) for s in t.correctness_sizes)
    timing = t.timing_sizes[0]
    assert t.bytes(timing) >= 1 << 28 or t.flops(timing) >= 1e11, "the timing size must fill an H200"


@pytest.mark.parametrize("name", TASKS)
def test_every_configuration_of_every_seed_plans_at_every_size(name: str) -> None:
    t = task(name)
    for v in t.seeds():
        space = v.spec.space()
        # small enough to measure whole (recordings for replay and the bench hold every one)
        assert 2 <= len(space) <= 500, f"{v.name}: {len(space)} configurations"
        for cfg in space:
            for sizes in (*t.correctness_sizes, *t.timing_sizes):
                plan = make_plan(v.spec, t, sizes, cfg, H200)
                assert plan.calls


@pytest.mark.parametrize("name", TASKS)
def test_inputs_are_fresh_per_seed_signed_and_reproducible(name: str) -> None:
    t = task(name)
    sizes = t.correctness_sizes[-1]
    a, b, c = (t.make_inputs(np, sizes, s) for s in (1, 1, 2))
    kinds = {arg.name: arg.dtype for arg in t.inputs}
    for k in a:
        assert np.array_equal(a[k], b[k])
        assert not np.array_equal(a[k], c[k])
        assert a[k].dtype == dtypes.storage(kinds[k])
    x = np.concatenate([dtypes.widen(np, v, kinds[k]).ravel() for k, v in a.items()])
    assert x.std() > 0.1 and x.min() < 0 < x.max()


def test_admission_refuses_a_task_a_trivial_kernel_passes() -> None:
    cfg = task_config("vector_add")
    cfg["tolerance"] = {"atol": 10.0, "rtol": 10.0, "l2": 10.0}
    with pytest.raises(EvolveError, match="not admitted"):
        admit(load_task(cfg))


@pytest.mark.parametrize(("patch", "message"), [
    ({"args": {}}, "input and one output"),
    ({"sizes": {"correctness": [{"n": 1}], "timing": []}}, "sizes.correctness and sizes.timing"),
    ({"sizes": {"correctness": [{"n": 1}], "timing": [{"m": 2}]}}, "every size must name"),
    ({"sizes": {"correctness": [{"n": 0}], "timing": [{"n": 2}]}}, "positive integer"),
    ({"seeds": ["nope/missing.cu"]}, "not found"),
    ({"reference": "no_such_reference"}, "reference"),
    ({"tolerance": {"atol": 1}}, "malformed"),
])
def test_malformed_task_configs(patch: dict, message: str) -> None:
    cfg = {**task_config("vector_add"), **patch}
    with pytest.raises(EvolveError, match=message):
        load_task(cfg)


def test_compare_reasons() -> None:
    tol = Tolerance(atol=1e-6, rtol=1e-5, l2=1e-5)
    ref = np.linspace(-1, 1, 100)
    assert compare(np, "y", ref.astype(np.float32), ref, tol) is None
    out = ref.astype(np.float32)
    out[7] = np.nan
    assert "1 of 100 elements not written (first at index 7)" in compare(np, "y", out, ref, tol)
    out = ref.astype(np.float32)
    out[3] += 0.5
    assert "worst at index 3" in compare(np, "y", out, ref, tol)
    out = ref.astype(np.float32) * np.float32(1 + 5e-6)
    assert compare(np, "y", out, ref, Tolerance(atol=0, rtol=1e-5, l2=1e-7)).startswith("y: relative L2")
    assert "shape" in compare(np, "y", out[:10], ref, tol)
    out = ref.astype(np.float32)
    out[0] = np.inf
    assert "outside tolerance" in compare(np, "y", out, ref, tol)


def test_trivial_outputs_cover_the_design_cases() -> None:
    t = task("softmax")
    sizes = t.correctness_sizes[1]
    inputs = t.make_inputs(np, sizes, 0)
    cases = trivial_outputs(t, sizes, inputs, t.expected(np, inputs, sizes), {"y": np.nan})
    assert set(cases) == {"no-op", "zeros", "constant", "identity"}
    assert np.isnan(cases["no-op"]["y"]).all()


def test_integer_outputs_are_compared_exactly_and_unwritten_ones_found() -> None:
    """An int32 output is pre-filled with a random value, not NaN (which crashed the worker)."""
    rng = np.random.default_rng(1)
    fill = unwritten_fill("int32", rng)
    assert isinstance(fill, int) and np.iinfo(np.int32).min <= fill <= np.iinfo(np.int32).max
    assert np.isnan(unwritten_fill("float16", rng))
    ref = np.arange(10, dtype=np.float64)
    out = np.full(10, fill, dtype=np.int32)
    out[:7] = np.arange(7)
    tol = Tolerance(atol=0.5, rtol=0.5, l2=0.5)  # integers ignore float tolerances
    assert "3 of 10 elements not written (first at index 7)" in compare(np, "i", out, ref, tol, fill)
    out[7:] = [7, 8, 10]
    reason = compare(np, "i", out, ref, tol, fill)
    assert "1 of 10 elements differ; first at index 9: got 10, expected 9" in reason
    out[9] = 9
    assert compare(np, "i", out, ref, tol, fill) is None


def test_plan_limits() -> None:
    t = task("vector_add")
    v = t.seeds()[0]
    cfg = v.spec.default
    sizes = t.timing_sizes[0]
    import dataclasses
    tiny = dataclasses.replace(H200, max_threads_per_block=32, max_shared_per_block=0)
    with pytest.raises(SpecError, match="threads per block"):
        make_plan(v.spec, t, sizes, cfg, tiny)
    with pytest.raises(SpecError, match="not one of"):
        make_plan(v.spec, t, sizes, {k: 3 for k in cfg}, H200)


def test_a_dtype_error_names_the_value_given() -> None:
    """Issue 28.12: 'bf16' is named, with the dtypes there are."""
    cfg = task_config("vector_add")
    cfg["args"]["a"]["dtype"] = "bf16"
    with pytest.raises(EvolveError, match=r"argument a: dtype 'bf16' is not one of float64, float32"):
        load_task(cfg)


@pytest.mark.parametrize("name", [*TASKS, "own:histogram", "own:bf16_rmsnorm", "own:row_argmax"])
def test_the_harness_warm_up_runs_for_every_task(name: str) -> None:
    """Issue 28.14: what the GPU worker runs on CuPy as it starts, run here on NumPy (the same calls)."""
    from pathlib import Path

    from evolve.task.correctness import warm_up
    from evolve.task.files import read_task_file

    own = Path(__file__).parents[1] / "own_tasks" / name.removeprefix("own:")
    t = load_task(read_task_file(own / f"{own.name}.yaml")) if name.startswith("own:") else task(name)
    smallest = min(t.correctness_sizes, key=lambda s: sum(s.values()))
    small = dataclasses.replace(t, correctness_sizes=(smallest,))
    warm_up(np, small)
