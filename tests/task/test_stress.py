"""Stress rounds (issue 24.1): inputs that expose numerically unstable kernels.

A softmax without the max subtraction and a layernorm with the one-pass variance E[x^2] - E[x]^2
passed every ordinary round (|x| <= ~44, |mean|/std <= ~2). Simulated in float32 on NumPy
(tests/unstable_kernels.py), judged by the task's own comparison (evolve.task.correctness), they still
pass the ordinary rounds and now fail a stress round, while honest float32 versions (the seeds'
algorithms among them) pass every round.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.paths import CONF_DIR
from evolve.task.correctness import compare_all, unjudgeable
from evolve.task.files import read_task_file
from evolve.task.stress import GENERIC, max_finite
from evolve.task.task import Task, builtin_task, load_task
from tests.app.test_check import copy, edit
from tests.helpers import unstable_kernels as k
from tests.helpers.runs import check_lines


@functools.cache
def rounds(name: str) -> list[tuple[str, dict, dict, dict]]:
    """(round, sizes, inputs, reference) of every judged round of a built-in task, as the
    evaluator makes them (NumPy here, the same values on the GPU)."""
    task = builtin_task(name)
    out = []
    for st in (None, *task.stress):
        for i, sizes in enumerate(task.correctness_sizes):
            inputs = task.make_inputs(np, sizes, 4242 + i, st)
            refs = task.expected(np, inputs, sizes)
            if st is None or unjudgeable(np, task, refs) is None:
                out.append((st.name if st else "ordinary", sizes, inputs, refs))
    return out


def failures(name: str, kernel: k.Kernel) -> dict[str, str]:
    """The rounds a simulated kernel fails, with the first reason each."""
    task = builtin_task(name)
    failed: dict[str, str] = {}
    for rnd, sizes, inputs, refs in rounds(name):
        shaped = {a.name: inputs[a.name].reshape(task.shape(a, sizes)) for a in task.inputs}
        if (reason := compare_all(np, task, kernel(**shaped), refs, sizes=sizes)) and rnd not in failed:
            failed[rnd] = reason
    return failed


@pytest.mark.parametrize(("task", "kernel", "caught_by"), [
    ("softmax", k.softmax_no_max, {"exp", "spread"}),
    ("layernorm", k.layernorm_one_pass_block, {"offset", "offset_x"}),
    ("layernorm", k.layernorm_one_pass_seq, {"offset", "offset_x"}),
])
def test_an_unstable_kernel_passes_the_ordinary_rounds_and_fails_stress_rounds(
        task: str, kernel: k.Kernel, caught_by: set[str]) -> None:
    failed = failures(task, kernel)
    assert "ordinary" not in failed  # what let it through before the stress rounds
    assert caught_by <= set(failed), failed


@pytest.mark.parametrize(("task", "kernel"), [
    ("softmax", k.softmax_max_seq), ("softmax", k.softmax_max_block), ("softmax", k.softmax_online),
    ("layernorm", k.layernorm_two_pass_block), ("layernorm", k.layernorm_shifted_block),
    ("layernorm", k.layernorm_shifted_seq),
])
def test_honest_float32_kernels_pass_every_round(task: str, kernel: k.Kernel) -> None:
    assert failures(task, kernel) == {}


def stressed_values(task: Task, stress: str, seed: int = 5) -> dict[str, np.ndarray]:
    st = next(s for s in task.stress if s.name == stress)
    sizes = task.correctness_sizes[-1]
    return {n: dtypes.widen(np, v, a.dtype) for a in task.inputs
            for n, v in task.make_inputs(np, sizes, seed, st).items() if n == a.name}


@pytest.mark.parametrize("name", ["softmax", "hgemm", "bgemm"])
def test_the_exp_round_goes_past_what_exp_of_the_dtype_holds(name: str) -> None:
    task = builtin_task(name)
    for seed in range(4):
        for a in task.inputs:
            x = stressed_values(task, "exp", seed)[a.name]
            assert math.log(max_finite(a.dtype)) < np.abs(x).max() < 2 * math.log(max_finite(a.dtype))


def test_the_offset_round_puts_the_mean_far_from_the_spread_with_the_sign_the_task_allows() -> None:
    ln = builtin_task("layernorm")
    for seed in range(6):
        v = stressed_values(ln, "offset", seed)
        x = v["x"]
        assert np.abs(x.mean()) / x.std() > 25
        assert (v["gamma"] > 0).all()  # gamma's shifts are positive: so is its offset
    rs = builtin_task("reduce_sum")
    assert (stressed_values(rs, "offset")["x"] > 0).all()


def test_huge_and_tiny_rounds_scale_to_a_quarter_power_of_the_dtype_range() -> None:
    sg = builtin_task("sgemm")
    top = max_finite("float32")
    huge, tiny = stressed_values(sg, "huge")["a"], stressed_values(sg, "tiny")["a"]
    assert top ** 0.25 / 4 < np.abs(huge).max() <= top ** 0.25
    assert top ** -0.25 / 2 < np.abs(tiny).max() <= 4 * top ** -0.25


def test_stressed_inputs_are_made_again_from_their_seed_and_differ_from_the_ordinary_ones() -> None:
    task = builtin_task("layernorm")
    sizes = task.correctness_sizes[2]
    for st in task.stress:
        a, b = task.make_inputs(np, sizes, 77, st), task.make_inputs(np, sizes, 77, st)
        plain = task.make_inputs(np, sizes, 77)
        assert all(np.array_equal(a[n], b[n]) for n in a)
        assert not np.array_equal(a["x"], plain["x"])


def test_every_built_in_task_gets_the_generic_rounds() -> None:
    for name in sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml")):
        names = [s.name for s in builtin_task(name).stress]
        assert set(names) >= set(GENERIC) - ({"offset"} if name == "hgemm" else set()), name


def test_a_round_whose_reference_does_not_fit_the_output_is_not_judged() -> None:
    task = builtin_task("hgemm")
    cfg = {k2: v for k2, v in task.config.items() if k2 != "stress"}
    full = load_task(cfg)
    st = next(s for s in full.stress if s.name == "offset")
    sizes = full.correctness_sizes[-1]
    refs = full.expected(np, full.make_inputs(np, sizes, 3, st), sizes)
    assert "exceeds float16's largest value" in (unjudgeable(np, full, refs) or "")


@pytest.mark.parametrize(("stress", "message"), [
    ({"generic": ["nope"]}, "stress.generic must be a list of exp, offset, huge, tiny"),
    ({"rounds": {"exp": {"x": {}}}}, "give it a name of its own"),
    ({"rounds": {"big": {"nosuch": {}}}}, "['nosuch'] are not inputs"),
    ({"rounds": {"big": {"x": {"dist": "poisson"}}}}, "stress round 'big', x: init.dist must be one of"),
    ({"other": 1}, "stress takes generic and rounds"),
])
def test_bad_stress_declarations_are_one_line_errors(stress: dict, message: str) -> None:
    cfg = {**builtin_task("softmax").config, "stress": stress}
    with pytest.raises(EvolveError, match="task softmax: malformed configuration") as exc:
        load_task(cfg)
    assert message in str(exc.value)


def test_check_names_a_skipped_generic_round_and_refuses_a_declared_one(tmp_path) -> None:
    folder = copy("bf16_rmsnorm", tmp_path)
    yaml_path = folder / "bf16_rmsnorm.yaml"
    code, lines = check_lines(read_task_file(yaml_path), compile_all_up_to=0, compile_sample=0)
    assert code == 0, lines
    assert any(line.startswith("check: stress rounds (exp, offset, huge, tiny): the float64 reference "
                               "is finite and fits the outputs in") for line in lines), lines
    # y = x / rms(x) * w: weights near float32's largest value put y past bfloat16's
    edit(yaml_path, "args:\n", "stress:\n  rounds:\n    overflow: {w: {scale: [1.0e+37, 2.0e+37], "
         "shift: [1.0e+38, 2.0e+38]}}\nargs:\n")
    code, lines = check_lines(read_task_file(yaml_path), compile_all_up_to=0, compile_sample=0)
    assert code == 1
    assert any(line.startswith("problem: stress round overflow at ") and "a round that cannot judge is "
               "refused" in line for line in lines), lines


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["softmax", "layernorm", "hgemm", "bgemm"])
def test_the_device_makes_the_stressed_values_the_host_makes(name: str) -> None:
    import cupy as cp

    task = builtin_task(name)
    sizes = task.correctness_sizes[2]
    for st in task.stress:
        host, dev = task.make_inputs(np, sizes, 31, st), task.make_inputs(cp, sizes, 31, st)
        for a in task.inputs:  # normal values: the device's logf/cospif differ in the last bits of
            # float32 (most elements), which rounding to fp16/bf16 shows as one unit on rare elements
            h, d = dtypes.widen(np, host[a.name], a.dtype), dtypes.widen(np, cp.asnumpy(dev[a.name]), a.dtype)
            rtol = 1e-5
            if (dt := dtypes.get(a.dtype)).itemsize < 4:
                assert np.mean(d == h) > 0.98, (st.name, a.name)
                rtol = max(rtol, 2 * dt.tolerance.rtol)
            assert np.allclose(d, h, rtol=rtol, atol=rtol * np.abs(h).max()), (st.name, a.name)
