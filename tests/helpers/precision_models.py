"""fp32 GEMM kernels simulated on NumPy, honest and reduced-precision ones, for
tests/test_precision.py and the table of docs/precision.md: each rounds where its kernel rounds
(operands to TF32 or bf16, the accumulator after each k-slice) and nowhere else."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import ml_dtypes
import numpy as np

F = np.float32
Model = Callable[[np.ndarray, np.ndarray], np.ndarray]


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to nearest even at TF32's 10 mantissa bits (what a TF32 tensor core reads)."""
    u = x.astype(F).view(np.uint32).astype(np.uint64)
    return ((u + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)).astype(np.uint32).view(F)


def bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(F).astype(ml_dtypes.bfloat16).astype(F)


def accumulate(step: int = 1, acc: type = F, reverse: bool = False, skip: int | None = None) -> Model:
    """c += (a[:, k-slice] @ b[k-slice]) exactly, rounded to ``acc`` after each slice of ``step``
    (1: an FMA chain); ``reverse`` walks K backwards; ``skip`` leaves out that slice's products."""

    def model(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        c = np.zeros((a.shape[0], b.shape[1]), acc)
        starts = list(range(0, a.shape[1], step))
        if skip is not None:
            del starts[min(skip, len(starts) - 1)]
        for k in starts[::-1] if reverse else starts:
            part = a[:, k:k + step].astype(np.float64) @ b[k:k + step].astype(np.float64)
            c = (c.astype(np.float64) + part).astype(acc)
        return c.astype(np.float64)

    return model


def split_k(parts: int) -> Model:
    """fp32 FMA chains over ``parts`` slices of K, their partial sums added at the end."""

    def model(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        edges = np.linspace(0, a.shape[1], parts + 1).astype(int)
        partial = [accumulate()(a[:, i:j], b[i:j]) for i, j in itertools.pairwise(edges) if j > i]
        return np.sum(partial, axis=0, dtype=F).astype(np.float64)

    return model


def tensor_core(round_: Callable[[np.ndarray], np.ndarray], products: int, step: int = 8) -> Model:
    """A tensor core on split operands: x = hi + lo with hi = round_(x), lo = round_(x - hi);
    ``products`` 1: hi*hi only (plain TF32 or bf16), 3: hi*hi + hi*lo + lo*hi (3xTF32, bf16x3);
    each k-slice of ``step`` exact products goes into an fp32 accumulator."""

    def model(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ah, bh = round_(a), round_(b)
        al, bl = round_((a - ah).astype(F)), round_((b - bh).astype(F))
        pairs = [(ah, bh), (ah, bl), (al, bh)][:products]
        c = np.zeros((a.shape[0], b.shape[1]), F)
        for k in range(0, a.shape[1], step):
            part = sum(p[:, k:k + step].astype(np.float64) @ q[k:k + step].astype(np.float64)
                       for p, q in pairs)
            c = (c.astype(np.float64) + part).astype(F)
        return c.astype(np.float64)

    return model


HONEST: dict[str, Model] = {
    "fp32 FMA chain": accumulate(),
    "fp32 FMA chain, K reversed": accumulate(reverse=True),
    "fp32, 16-product slices": accumulate(16),
    "fp32 split-K (7 parts)": split_k(7),
    "3xTF32": tensor_core(tf32, 3),
}
REDUCED: dict[str, Model] = {
    "TF32 operands": tensor_core(tf32, 1),
    "bf16 operands": tensor_core(bf16, 1),
    "bf16x3": tensor_core(bf16, 3),
    "fp16 accumulator": accumulate(16, np.float16),
    "one k-slice of 8 skipped": accumulate(8, skip=3),
}
