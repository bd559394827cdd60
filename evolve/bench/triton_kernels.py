"""Triton kernels for the built-in tasks: the "Triton" peer of ``evolve-bench``, what a user writing
Triton by hand would have. Each is ``@triton.autotune``-d over the usual configurations (the GEMMs
over Triton's tutorial set plus the larger tiles Hopper wants) and computes exactly the task: fp32
accumulation, ``input_precision="ieee"`` for sgemm (no TF32, as on every side of the bench).

``launch(task, tensors)`` runs one call on PyTorch tensors named as the task's arguments, outputs
written in place; ``config=`` runs one configuration instead of autotuning, which is how the tests
go through every configuration under Triton's CPU interpreter (``TRITON_INTERPRET=1``, set before
this module is imported). Importing it needs ``triton``; nothing else in cuda-evolve does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import triton
import triton.language as tl

REDUCE_PROGRAMS = 1024  # reduce_sum's first pass: at most this many partial sums


def _configs(space: list[dict[str, int]], warps: tuple[int, ...] = (4, 8)) -> list[triton.Config]:
    return [triton.Config(kw, num_warps=w) for kw in space for w in warps]


def _gemm_configs() -> list[triton.Config]:
    """Triton's matmul tutorial set (block M, N, K, stages, warps), with the Hopper-sized tiles."""
    table = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
             (64, 256, 32, 4, 4), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 32, 32, 4, 4),
             (64, 32, 32, 5, 2), (32, 64, 32, 5, 2)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=s, num_warps=w)
            for m, n, k, s, w in table]


CONFIGS: dict[str, list[triton.Config]] = {
    "vector_add": _configs([{"BLOCK": b} for b in (1024, 2048, 4096, 8192)]),
    "reduce_sum": _configs([{"BLOCK": b} for b in (1024, 2048, 4096)]),
    "softmax": _configs([{"BLOCK": b} for b in (1024, 2048, 4096, 8192)], (4, 8, 16)),
    "layernorm": _configs([{"BLOCK": b} for b in (1024, 2048, 4096, 8192)], (4, 8, 16)),
    "transpose": _configs([{"BLOCK_R": r, "BLOCK_C": c}
                           for r, c in ((32, 32), (64, 64), (32, 128), (128, 32))]),
    "gemm": _gemm_configs(),
}


# ---- elementwise and reductions ----------------------------------------------------------------
@triton.jit
def _vector_add(a, b, c, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c + offs, tl.load(a + offs, mask=mask) + tl.load(b + offs, mask=mask), mask=mask)


@triton.jit
def _reduce_partial(x, partial, n, BLOCK: tl.constexpr):
    """Program p sums chunks p, p + G, p + 2G, ... (G programs) into partial[p], in fp32."""
    pid, programs = tl.program_id(0), tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(pid.to(tl.int64) * BLOCK, n, programs.to(tl.int64) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x + offs, mask=offs < n, other=0.0)
    tl.store(partial + pid, tl.sum(acc, axis=0))


@triton.jit
def _reduce_final(partial, out, count, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out, tl.sum(tl.load(partial + offs, mask=offs < count, other=0.0), axis=0))


@triton.jit
def _softmax(x, y, cols, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
    """A row per program: in registers where it fits one block (one read), else an online max and
    sum over column blocks, then a second pass that writes."""
    row = tl.program_id(0).to(tl.int64) * cols
    offs = tl.arange(0, BLOCK)
    if ONE_PASS:
        v = tl.load(x + row + offs, mask=offs < cols, other=-float("inf"))
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(y + row + offs, e / tl.sum(e, axis=0), mask=offs < cols)
    else:
        m = tl.full([BLOCK], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, cols, BLOCK):  # cols > BLOCK: every lane sees a value in the first block
            v = tl.load(x + row + start + offs, mask=start + offs < cols, other=-float("inf"))
            m_new = tl.maximum(m, v)
            s = s * tl.exp(m - m_new) + tl.exp(v - m_new)
            m = m_new
        top = tl.max(m, axis=0)
        total = tl.sum(s * tl.exp(m - top), axis=0)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            v = tl.load(x + row + start + offs, mask=mask, other=0.0)
            tl.store(y + row + start + offs, tl.exp(v - top) / total, mask=mask)


@triton.jit
def _layernorm(x, gamma, beta, y, cols, eps, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
    """A row per program: mean, then the biased variance around it, then the normalized row (the
    row in registers where it fits one block, else three passes over column blocks)."""
    row = tl.program_id(0).to(tl.int64) * cols
    offs = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = offs < cols
        v = tl.load(x + row + offs, mask=mask, other=0.0)
        mean = tl.sum(v, axis=0) / cols
        d = tl.where(mask, v - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / cols + eps)
        g = tl.load(gamma + offs, mask=mask)
        b = tl.load(beta + offs, mask=mask)
        tl.store(y + row + offs, d * rstd * g + b, mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, cols, BLOCK):
            acc += tl.load(x + row + start + offs, mask=start + offs < cols, other=0.0)
        mean = tl.sum(acc, axis=0) / cols
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            d = tl.where(mask, tl.load(x + row + start + offs, mask=mask, other=0.0) - mean, 0.0)
            acc += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / cols + eps)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            v = tl.load(x + row + start + offs, mask=mask, other=0.0)
            g = tl.load(gamma + start + offs, mask=mask)
            b = tl.load(beta + start + offs, mask=mask)
            tl.store(y + row + start + offs, (v - mean) * rstd * g + b, mask=mask)


@triton.jit
def _transpose(x, out, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    tile = tl.load(x + r[:, None] * cols + c[None, :], mask=mask)
    tl.store(out + c[None, :] * rows + r[:, None], tile, mask=mask)


# ---- matrix products ---------------------------------------------------------------------------
@triton.jit
def _matmul(a, b, c, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, IEEE: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """c = a @ b with fp32 accumulation, tiles in groups of GROUP_M tile-rows (L2 reuse), any strides:
    hgemm and bgemm pass w [N, K] as b with strides (1, K), i.e. w^T."""
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        ta = tl.load(a + rm[:, None] * s_am + k[None, :] * s_ak, mask=(rm[:, None] < M) & (k[None, :] < K),
                     other=0.0)
        tb = tl.load(b + k[:, None] * s_bk + rn[None, :] * s_bn, mask=(k[:, None] < K) & (rn[None, :] < N),
                     other=0.0)
        if IEEE:  # noqa: SIM108 (a branch on a constexpr, resolved when Triton compiles)
            acc = tl.dot(ta, tb, acc, input_precision="ieee")
        else:
            acc = tl.dot(ta, tb, acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c + rm[:, None] * s_cm + rn[None, :] * s_cn, acc.to(c.dtype.element_ty), mask=mask)


_TUNED = {
    "vector_add": triton.autotune(CONFIGS["vector_add"], key=["n"])(_vector_add),
    "reduce_sum": triton.autotune(CONFIGS["reduce_sum"], key=["n"])(_reduce_partial),
    "softmax": triton.autotune(CONFIGS["softmax"], key=["cols"])(
        triton.heuristics({"ONE_PASS": lambda a: a["BLOCK"] >= a["cols"]})(_softmax)),
    "layernorm": triton.autotune(CONFIGS["layernorm"], key=["cols"])(
        triton.heuristics({"ONE_PASS": lambda a: a["BLOCK"] >= a["cols"]})(_layernorm)),
    "transpose": triton.autotune(CONFIGS["transpose"], key=["rows", "cols"])(_transpose),
    "gemm": triton.autotune(CONFIGS["gemm"], key=["M", "N", "K", "IEEE"])(_matmul),
}
TASKS = ("vector_add", "reduce_sum", "softmax", "layernorm", "transpose", "sgemm", "hgemm", "bgemm")
LAYERNORM_EPS = 1e-5  # as evolve.task.references.LAYERNORM_EPS and the layernorm task's EPS define


def configs(task: str) -> list[triton.Config]:
    """The configurations the task's kernel is autotuned over."""
    return CONFIGS["gemm" if task.endswith("gemm") else task]


def launch(task: str, t: Mapping[str, Any], config: triton.Config | None = None) -> None:
    """One call of the task's Triton kernel on tensors named as the task's arguments (and, for
    reduce_sum, a float32 ``partial`` of REDUCE_PROGRAMS elements); autotuned unless ``config``."""
    if task not in TASKS:
        raise KeyError(f"no Triton kernel for task {task!r}; tasks with one: {', '.join(TASKS)}")
    tuned = _TUNED["gemm" if task.endswith("gemm") else task]
    kernel, extra = (tuned, {}) if config is None else (tuned.fn, config.all_kwargs())

    def run(grid: Callable[[dict[str, Any]], tuple[int, ...]], *args: Any) -> None:
        kernel[grid](*args, **extra)

    if task == "vector_add":
        n = t["a"].numel()
        run(lambda m: (triton.cdiv(n, m["BLOCK"]),), t["a"], t["b"], t["c"], n)
    elif task == "reduce_sum":
        n = t["x"].numel()
        programs: list[int] = []

        def grid(m: dict[str, Any]) -> tuple[int]:
            programs[:] = [min(triton.cdiv(n, m["BLOCK"]), REDUCE_PROGRAMS)]
            return (programs[0],)

        run(grid, t["x"], t["partial"], n)
        _reduce_final[(1,)](t["partial"], t["out"], programs[0], BLOCK=REDUCE_PROGRAMS)
    elif task == "softmax":
        rows, cols = t["x"].shape
        run(lambda m: (rows,), t["x"], t["y"], cols)
    elif task == "layernorm":
        rows, cols = t["x"].shape
        run(lambda m: (rows,), t["x"], t["gamma"], t["beta"], t["y"], cols, LAYERNORM_EPS)
    elif task == "transpose":
        rows, cols = t["x"].shape
        run(lambda m: (triton.cdiv(rows, m["BLOCK_R"]), triton.cdiv(cols, m["BLOCK_C"])), t["x"], t["out"],
            rows, cols)
    elif task == "sgemm":
        a, b, c = t["a"], t["b"], t["c"]
        (M, K), N = a.shape, b.shape[1]
        run(_gemm_grid(M, N), a, b, c, M, N, K, K, 1, N, 1, N, 1, True)
    else:  # hgemm, bgemm: y = x @ w^T
        x, w, y = t["x"], t["w"], t["y"]
        (M, K), N = x.shape, w.shape[0]
        run(_gemm_grid(M, N), x, w, y, M, N, K, K, 1, 1, K, N, 1, False)


def _gemm_grid(M: int, N: int) -> Callable[[dict[str, Any]], tuple[int]]:
    return lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)
