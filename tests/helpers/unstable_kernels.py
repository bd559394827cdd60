"""Softmax and layernorm kernels simulated in float32 on NumPy, the unstable ones and honest ones,
for tests/test_stress.py: each does the arithmetic of a CUDA kernel, in its order (a thread's
sequential sum is a float32 cumulative sum; a block's is per-thread strided partial sums reduced
as a tree of halves)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

F = np.float32
EPS = F(1e-5)
Kernel = Callable[..., dict[str, np.ndarray]]


def seq_sum(x: np.ndarray) -> np.ndarray:
    """One thread per row: x[r, 0] + x[r, 1] + ... in float32."""
    return np.cumsum(x, axis=1, dtype=F)[:, -1]


def block_sum(x: np.ndarray, threads: int = 256) -> np.ndarray:
    """One block per row: thread t sums columns t, t + threads, ...; then a tree of halves."""
    rows, n = x.shape
    pad = np.zeros((rows, (-n) % threads), F)
    parts = np.cumsum(np.concatenate([x, pad], 1).reshape(rows, -1, threads), axis=1, dtype=F)[:, -1]
    while parts.shape[1] > 1:
        half = parts.shape[1] // 2
        parts = (parts[:, :half] + parts[:, half:]).astype(F)
    return parts[:, 0]


# ---- softmax ----------------------------------------------------------------------------------
def softmax_no_max(x: np.ndarray) -> dict[str, np.ndarray]:
    """Unstable: exp(x) / sum(exp(x)), no max subtracted (exp overflows past 88.7)."""
    with np.errstate(all="ignore"):
        e = np.exp(x).astype(F)
        return {"y": (e / block_sum(e)[:, None]).astype(F)}


def softmax_max_seq(x: np.ndarray) -> dict[str, np.ndarray]:
    """The naive seed: max, then a sequential sum of exp(x - max), then exp(x - max) / sum."""
    e = np.exp((x - x.max(axis=1, keepdims=True)).astype(F)).astype(F)
    return {"y": (e * (F(1) / seq_sum(e))[:, None]).astype(F)}


def softmax_online(x: np.ndarray) -> dict[str, np.ndarray]:
    """Online softmax (one pass for max and sum, rescaling the sum when the max grows), then a
    write pass; honest."""
    m = np.full(x.shape[0], -np.inf, F)
    s = np.zeros(x.shape[0], F)
    for c in range(x.shape[1]):
        new = np.maximum(m, x[:, c])
        s = (s * np.exp((m - new).astype(F)) + np.exp((x[:, c] - new).astype(F))).astype(F)
        m = new
    return {"y": (np.exp((x - m[:, None]).astype(F)) / s[:, None]).astype(F)}


def softmax_max_block(x: np.ndarray) -> dict[str, np.ndarray]:
    e = np.exp((x - x.max(axis=1, keepdims=True)).astype(F)).astype(F)
    return {"y": (e / block_sum(e)[:, None]).astype(F)}


# ---- layernorm --------------------------------------------------------------------------------
def _normalize(x: np.ndarray, mean: np.ndarray, var: np.ndarray, gamma: np.ndarray,
               beta: np.ndarray) -> dict[str, np.ndarray]:
    with np.errstate(all="ignore"):
        rstd = (F(1) / np.sqrt((var + EPS).astype(F))).astype(F)
        return {"y": ((x - mean[:, None]) * rstd[:, None] * gamma + beta).astype(F)}


def _one_pass(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, total: Callable) -> dict[str, np.ndarray]:
    n = F(x.shape[1])
    mean = (total(x) / n).astype(F)
    var = (total((x * x).astype(F)) / n - mean * mean).astype(F)
    return _normalize(x, mean, var, gamma, beta)


def layernorm_one_pass_block(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> dict[str, np.ndarray]:
    """Unstable: var = E[x^2] - E[x]^2 with block sums."""
    return _one_pass(x, gamma, beta, block_sum)


def layernorm_one_pass_seq(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> dict[str, np.ndarray]:
    """Unstable: var = E[x^2] - E[x]^2 with one thread per row."""
    return _one_pass(x, gamma, beta, seq_sum)


def layernorm_two_pass_block(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> dict[str, np.ndarray]:
    """The block_row seed's on-chip path: a block sum for the mean, one of (x - mean)^2."""
    n = F(x.shape[1])
    mean = (block_sum(x) / n).astype(F)
    d = (x - mean[:, None]).astype(F)
    return _normalize(x, mean, (block_sum((d * d).astype(F)) / n).astype(F), gamma, beta)


def layernorm_shifted_block(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> dict[str, np.ndarray]:
    """The two_pass seed (and block_row's wide rows): sums of d and d^2, d = x - x[row, 0]."""
    n = F(x.shape[1])
    d = (x - x[:, :1]).astype(F)
    dmean = (block_sum(d) / n).astype(F)
    var = np.maximum((block_sum((d * d).astype(F)) / n - dmean * dmean).astype(F), F(0))
    return _normalize(x, (x[:, 0] + dmean).astype(F), var, gamma, beta)


def layernorm_shifted_seq(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> dict[str, np.ndarray]:
    """The naive seed: one thread per row, mean of x - x[row, 0], then sum of (x - mean)^2."""
    n = F(x.shape[1])
    mean = (x[:, 0] + seq_sum((x - x[:, :1]).astype(F)) / n).astype(F)
    d = (x - mean[:, None]).astype(F)
    return _normalize(x, mean, (seq_sum((d * d).astype(F)) / n).astype(F), gamma, beta)
