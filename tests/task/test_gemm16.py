"""hgemm and bgemm: their tolerances pass fp32 accumulation of half-precision products (a tensor
core's truncating one too) and refuse a half-precision accumulator, proven on simulated kernels
judged by the evaluator's own comparison."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

from evolve import dtypes
from evolve.evaluate.metrics import bound, peak_text
from evolve.hardware import named
from evolve.task.correctness import compare_all
from tests.helpers.tasks import hardware_config, task

Model = Callable[[np.ndarray, np.ndarray], np.ndarray]


def accumulate(acc: type, step: int) -> Model:
    """y as a kernel with an ``acc`` accumulator computes it: each step adds ``step`` products,
    summed exactly (one mma instruction's k-slice; 1: an FMA), to the accumulator, rounding once."""

    def model(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        s = np.zeros((x.shape[0], w.shape[0]), acc)
        for k in range(0, x.shape[1], step):
            s = (s.astype(np.float64) + x[:, k:k + step] @ w[:, k:k + step].T).astype(acc)
        return s.astype(np.float64)

    return model


def truncated(value: np.ndarray) -> np.ndarray:
    """float64 to float32 rounded toward zero."""
    r = value.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(value)
    r[over] = np.nextafter(r[over], np.float32(0))
    return r


def tensor_core(step: int) -> Model:
    """y as a tensor core computes it: each k-slice of ``step`` exact products is added to the
    fp32 accumulator and the sum truncated (rounded toward zero), a bias that grows with K."""

    def model(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        s = np.zeros((x.shape[0], w.shape[0]), np.float32)
        for k in range(0, x.shape[1], step):
            s = truncated(s.astype(np.float64) + x[:, k:k + step] @ w[:, k:k + step].T)
        return s.astype(np.float64)

    return model


def split_k(parts: int) -> Model:
    """fp32 partial sums over ``parts`` slices of K, added at the end (a split-K kernel)."""

    def model(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        edges = np.linspace(0, x.shape[1], parts + 1).astype(int)
        partial = [accumulate(np.float32, 16)(x[:, a:b], w[:, a:b]) for a, b in itertools.pairwise(edges)]
        return np.sum(partial, axis=0, dtype=np.float32).astype(np.float64)

    return model


HONEST = {"fp32 FMA": accumulate(np.float32, 1), "fp32 mma": accumulate(np.float32, 16),
          "fp32 split-K": split_k(7),
          **{f"tensor core, {n} products a step": tensor_core(n) for n in (4, 8, 16)}}
HALF = {"fp16 mma": accumulate(np.float16, 16), "fp16 FMA": accumulate(np.float16, 1)}
CHEATS = {"hgemm": HALF, "bgemm": {**HALF, "bf16 mma": accumulate(ml_dtypes.bfloat16, 16)}}


def judged(name: str, sizes: dict[str, int], seed: int, model: Model) -> str | None:
    """The evaluator's verdict on the model's y (rounded once to the task's dtype)."""
    t = task(name)
    inputs = t.make_inputs(np, sizes, seed)
    x, w = (dtypes.widen(np, inputs[k], t.args[i].dtype) for i, k in enumerate(("x", "w")))
    y = dtypes.store(model(x, w).astype(np.float32), t.outputs[0].dtype)
    return compare_all(np, t, {"y": y}, t.expected(np, inputs, sizes), {"y": np.nan})


@pytest.mark.parametrize("name", ["hgemm", "bgemm"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fp32_accumulation_passes_at_every_size(name: str, seed: int) -> None:
    for sizes in task(name).correctness_sizes:
        for label, model in HONEST.items():
            assert judged(name, sizes, seed, model) is None, (label, sizes)


@pytest.mark.parametrize("name", ["hgemm", "bgemm"])
@pytest.mark.parametrize("seed", [1, 2])
def test_half_precision_accumulation_is_rejected_at_the_long_k(name: str, seed: int) -> None:
    long_k = max(task(name).correctness_sizes, key=lambda s: s["K"])
    for label, model in CHEATS[name].items():
        reason = judged(name, long_k, seed, model)
        assert reason is not None and reason.startswith("y: "), (label, reason)


def skipping(keep: Callable[[int, int], bool]) -> Model:
    """An fp32 kernel that leaves out the 16-wide k-slices ``keep(start, K)`` rejects (less work)."""

    def model(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        k = x.shape[1]
        cols = [c for s in range(0, k, 16) if keep(s, k) for c in range(s, min(s + 16, k))]
        return accumulate(np.float32, 16)(x[:, cols], w[:, cols])

    return model


SKIPS = {"every fourth k-slice skipped": skipping(lambda s, k: s % 64 != 48),
         "the ragged k tail skipped": skipping(lambda s, k: s + 16 <= k),
         "the last k-slice skipped": skipping(lambda s, k: s + 16 < k)}


@pytest.mark.parametrize("name", ["hgemm", "bgemm"])
@pytest.mark.parametrize("label", sorted(SKIPS))
def test_the_tensor_core_tolerance_still_rejects_skipped_products(name: str, label: str) -> None:
    """atol grew to 2^-11 of max|y| for the tensor cores' truncation: a kernel that does less work
    (products left out) must still fail at some correctness size."""
    verdicts = [judged(name, sizes, 1, SKIPS[label]) for sizes in task(name).correctness_sizes]
    assert any(v is not None and v.startswith("y: ") for v in verdicts), label


@pytest.mark.parametrize(("name", "peak"), [("hgemm", "fp16_tensor"), ("bgemm", "bf16_tensor")])
def test_the_roofline_is_the_tensor_core_peak(name: str, peak: str) -> None:
    t, hw = task(name), named(hardware_config("h200"))
    assert t.peak == peak and hw.peak(peak) == 989e12
    assert peak_text(t, hw) == f"{peak} peak 989.0 TFLOP/s (datasheet)"
    assert bound(t, hw) == "compute"
    shapes = [(s["M"], s["N"], s["K"]) for s in t.timing_sizes]
    assert shapes == [(4096, 4096, 4096), (8192, 14336, 4096), (8192, 4096, 14336)]
    assert t.flops(t.timing_sizes[1]) == 2 * 8192 * 14336 * 4096
