"""Dtypes, input distributions and inout arguments, on the host (the GPU runs the same arithmetic;
tests/test_gpu_own_tasks.py compares the two).

Every fill kernel is compiled with NVRTC here, so a syntax error in the device half cannot wait
for a GPU to show.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.kernel.compiler import compile_cuda
from evolve.task.correctness import admit, compare, compare_all, trivial_outputs, unwritten_fill
from evolve.task.files import read_task_file
from evolve.task.inputs import DISTS, Draw, cuda_source, fill
from evolve.task.task import Tolerance, load_task

OWN = Path(__file__).parents[1] / "own_tasks"


def own(name: str):
    return load_task(read_task_file(OWN / name / f"{name}.yaml"))


def make(dist: str, dtype: str, n: int, seed: int = 7, **kw) -> np.ndarray:
    out = np.empty(n, dtype=dtypes.storage(dtype))
    fill(np, out, dtype, Draw(dist, **kw), seed)
    return out


@pytest.mark.parametrize(("dist", "dtype"), list(itertools.product(DISTS, dtypes.DTYPES)))
def test_every_fill_kernel_compiles(dist: str, dtype: str) -> None:
    compile_cuda(cuda_source(dist, dtype), {}, "sm_90")


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_values_are_truncated_toward_zero_and_saturate(name: str) -> None:
    rng = np.random.default_rng(1)
    v = np.concatenate([rng.normal(0, 1, 20000) * 10.0 ** rng.uniform(-8, 6, 20000),
                        [0, -0.0, 1e-30, 448, 449, 500, 57344, 60000, 1e9, -1e9]]).astype(np.float32)
    table = dtypes.widen(np, np.arange(256, dtype=np.uint8), name)
    finite = np.unique(np.abs(table[np.isfinite(table)]))
    want = finite[np.searchsorted(finite, np.abs(v).astype(np.float64), side="right") - 1] * np.sign(v)
    got = dtypes.widen(np, dtypes.store(v, name), name)
    assert np.array_equal(got, want)


def test_bfloat16_rounds_to_nearest_even_like_ml_dtypes() -> None:
    v = np.random.default_rng(2).normal(0, 100, 100_000).astype(np.float32)
    assert np.array_equal(dtypes.store(v, "bfloat16"), v.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert np.array_equal(dtypes.widen(np, dtypes.store(v, "bfloat16"), "bfloat16"),
                          v.astype(ml_dtypes.bfloat16).astype(np.float64))


@pytest.mark.parametrize("name", list(dtypes.DTYPES))
def test_the_unwritten_sentinel_can_never_be_a_right_answer(name: str) -> None:
    d, rng = dtypes.get(name), np.random.default_rng(3)
    fills = [unwritten_fill(name, rng) for _ in range(50)]
    buf = np.full(4, fills[0], dtype=dtypes.storage(name))
    if d.kind == "float":
        assert np.isnan(dtypes.widen(np, buf, name)).all()
    elif d.kind == "bool":
        assert all(2 <= f <= 255 for f in fills)
    else:
        assert all(d.range()[0] <= f <= d.range()[1] for f in fills) and len(set(fills)) > 40


def test_distributions_respect_their_ranges_and_are_fresh_per_seed() -> None:
    x = make("uniform", "float32", 100_000, a=-3.0, b=5.0)
    assert x.min() >= -3 and x.max() < 5 and abs(x.mean() - 1) < 0.05
    k = make("randint", "int8", 100_000, lo=-5, hi=3)
    assert set(np.unique(k)) == set(range(-5, 4))
    t = make("ties", "float32", 10_000, a=0.5, b=1.0, hi=3)
    assert len(np.unique(t)) == 4 and np.allclose(np.unique(t), [0.25, 0.75, 1.25, 1.75])
    b = make("bernoulli", "bool", 100_000, p=0.25)
    assert set(np.unique(b)) == {0, 1} and abs(b.mean() - 0.25) < 0.01
    assert not np.array_equal(make("randint", "int32", 1000, seed=1, lo=0, hi=10**6),
                              make("randint", "int32", 1000, seed=2, lo=0, hi=10**6))
    assert np.array_equal(make("normal", "bfloat16", 1000, a=1.0, b=0.0),
                          make("normal", "bfloat16", 1000, a=1.0, b=0.0))


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 4097, 1 << 20])
def test_a_permutation_holds_every_index_once(n: int) -> None:
    p = make("permutation", "int64", n, seed=n)
    assert np.array_equal(np.sort(p), np.arange(n))
    if n >= 1000:
        assert (p != np.arange(n)).mean() > 0.99
        assert not np.array_equal(p, make("permutation", "int64", n, seed=1))


def test_wide_integer_ranges_use_the_whole_range() -> None:
    k = make("randint", "int64", 100_000, lo=-(2**61), hi=2**61)
    assert k.min() < -(2**60) and k.max() > 2**60


@pytest.mark.parametrize(("init", "message"), [
    ({"dist": "zipf"}, "init.dist must be one of"),
    ({"dist": "randint", "scale": [1, 2]}, "takes \\['high', 'low'\\], not \\['scale'\\]"),
    ({"dist": "randint", "low": 0, "high": "n * 1000"}, "does not fit int8"),
    ({"dist": "permutation"}, "a permutation of 1000 elements does not fit int8"),
    ({"dist": "uniform", "low": 1, "high": 1}, "is empty"),
    ({"dist": "bernoulli", "p": 2}, "init.p must be in"),
])
def test_bad_distributions_are_one_line_errors(init: dict, message: str) -> None:
    cfg = {"name": "bad", "reference": "vector_add", "seeds": [],
           "args": {"a": {"role": "input", "dtype": "int8", "shape": ["n"], "init": init},
                    "b": {"role": "input", "dtype": "int8", "shape": ["n"]},
                    "c": {"role": "output", "dtype": "int16", "shape": ["n"]}},
           "sizes": {"correctness": [{"n": 3}, {"n": 1000}], "timing": [{"n": 4096}]},
           "traffic": {"bytes": "4 * n"}}
    with pytest.raises(EvolveError, match=message):
        load_task(cfg)


def test_an_output_cannot_have_an_init_and_roles_are_checked() -> None:
    cfg = read_task_file(OWN / "histogram" / "histogram.yaml")
    bad = {**cfg, "args": {**cfg["args"], "extra": {"role": "output", "dtype": "int32", "shape": ["n"],
                                                     "init": {"dist": "randint"}}}}
    with pytest.raises(EvolveError, match="an output has no init"):
        load_task(bad)
    bad = {**cfg, "args": {**cfg["args"], "counts": {**cfg["args"]["counts"], "role": "both"}}}
    with pytest.raises(EvolveError, match="role must be one of input, output, inout"):
        load_task(bad)


def test_bool_outputs_are_compared_exactly_with_a_sentinel_that_is_neither() -> None:
    ref = np.array([0.0, 1.0, 1.0, 0.0])
    fill_value = unwritten_fill("bool", np.random.default_rng(0))
    out = np.array([0, 1, 1, fill_value], dtype=np.uint8)
    assert "1 of 4 elements not written (first at index 3)" in compare(
        np, "m", out, ref, None, fill_value, "bool")
    out[3] = 1
    assert "1 of 4 elements differ; first at index 3: got 1, expected 0" in compare(
        np, "m", out, ref, None, fill_value, "bool")
    out[3] = 0
    assert compare(np, "m", out, ref, None, fill_value, "bool") is None
    assert "not a value of bool" in compare(np, "m", out, ref * 2, None, fill_value, "bool")
    assert "not a value of uint8" in compare(np, "m", out, ref + 300, None, 7, "uint8")


def test_bfloat16_tolerance_passes_one_rounding_and_fails_a_few_ulps() -> None:
    t = own("bf16_rmsnorm")
    tol = t.tolerance_for(t.outputs[0])
    ref = np.random.default_rng(4).normal(0, 3, 10_000)
    rounded = dtypes.store(ref.astype(np.float32), "bfloat16")
    assert compare(np, "y", rounded, ref, tol, np.nan, "bfloat16") is None
    off = (rounded.astype(np.int32) + 3).astype(np.uint16)  # three units in the last place
    assert "outside tolerance" in compare(np, "y", off, ref, tol, np.nan, "bfloat16")
    nan = rounded.copy()
    nan[5] = dtypes.get("bfloat16").nan_bits
    assert "1 of 10000 elements not written (first at index 5)" in compare(np, "y", nan, ref, tol, np.nan,
                                                                           "bfloat16")


def test_default_tolerances_follow_the_output_dtypes() -> None:
    cfg = read_task_file(OWN / "bf16_rmsnorm" / "bf16_rmsnorm.yaml")
    t = load_task(cfg)
    assert t.tolerance == Tolerance(2**-7, 2**-7, 2**-8)
    mine = {**cfg, "args": {**cfg["args"], "y": {**cfg["args"]["y"], "tolerance": {"atol": 0.1, "rtol": 0.1,
                                                                                     "l2": 0.1}}}}
    assert load_task(mine).tolerance_for(load_task(mine).outputs[0]) == Tolerance(0.1, 0.1, 0.1)
    assert own("histogram").tolerance_for(own("histogram").outputs[0]) is None  # int32: exact


def emulate_rmsnorm(x: dict[str, np.ndarray]) -> np.ndarray:
    """What the bf16_rmsnorm seed computes: fp32 inside, one rounding to bfloat16."""
    v = dtypes.widen(np, x["x"], "bfloat16").astype(np.float32)
    w = dtypes.widen(np, x["w"], "bfloat16").astype(np.float32)
    mean = (v * v).sum(axis=1, keepdims=True) / np.float32(v.shape[1])
    inv = np.float32(1) / np.sqrt(mean + np.float32(1e-6))
    return dtypes.store(v * inv * w, "bfloat16")


def test_the_bfloat16_task_passes_a_kernel_that_computes_in_fp32() -> None:
    t = own("bf16_rmsnorm")
    admit(t)
    for i, sizes in enumerate(t.correctness_sizes):
        x = t.make_inputs(np, sizes, i)
        assert x["x"].dtype == np.uint16 and x["w"].dtype == np.uint16
        w = dtypes.widen(np, x["w"], "bfloat16")
        assert w.min() >= 0.5 and w.max() <= 1.5
        assert compare_all(np, t, {"y": emulate_rmsnorm(x)}, t.expected(np, x, sizes)) is None


def test_an_inout_argument_is_made_like_an_input_and_judged_like_an_output() -> None:
    t = own("histogram")
    assert [a.name for a in t.inputs] == ["values", "counts"] and [a.name for a in t.outputs] == ["counts"]
    assert [a.name for a in t.read_only] == ["values"] and t.fresh_outputs == ()
    admit(t)
    sizes = t.correctness_sizes[2]
    x = t.make_inputs(np, sizes, 5)
    assert x["values"].min() >= 0 and x["values"].max() <= sizes["bins"] - 1 and x["counts"].dtype == np.int32
    ref = t.expected(np, x, sizes)
    done = x["counts"] + np.bincount(x["values"], minlength=sizes["bins"]).astype(np.int32)
    assert compare_all(np, t, {"counts": done}, ref, {}) is None
    # a kernel that does nothing leaves the input in place: caught, not mistaken for unwritten
    cases = trivial_outputs(t, sizes, x, ref, {})
    assert np.array_equal(cases["no-op"]["counts"], x["counts"])
    assert "differ" in compare_all(np, t, cases["no-op"], ref, {})


def test_an_inout_whose_reference_leaves_it_unchanged_is_not_admitted() -> None:
    cfg = read_task_file(OWN / "histogram" / "histogram.yaml")
    cfg = {**cfg, "reference": "tests.helpers.task_refs:unchanged_counts"}
    with pytest.raises(EvolveError, match=r"not admitted: a trivial kernel \(no-op\)"):
        admit(load_task(cfg))


def test_integer_outputs_with_ties_need_the_first_index() -> None:
    t = own("row_argmax")
    admit(t)
    sizes = t.correctness_sizes[1]
    x = t.make_inputs(np, sizes, 1)
    assert len(np.unique(x["x"])) <= 16  # ties: 16 levels
    ref = t.expected(np, x, sizes)
    last = (sizes["cols"] - 1 - np.argmax(x["x"][:, ::-1], axis=1)).astype(np.int32)
    assert compare_all(np, t, {"idx": np.argmax(x["x"], axis=1).astype(np.int32)}, ref, {"idx": -7}) is None
    assert "differ" in compare_all(np, t, {"idx": last}, ref, {"idx": -7})
