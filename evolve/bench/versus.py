"""Evaluator throughput head to head with Kernel Tuner on the GPU: the same kernel, the same
search space, the same number of candidates drawn at random, correctness checked on both sides
(Kernel Tuner: its ``answer`` at the timing size; cuda-evolve: its full protocol — every
correctness size, guard zones, a checked call in every timed batch). Each tool is warmed up
first by a short run of its own (imports, CUDA context, and for cuda-evolve CuPy compiling the
harness's own kernels into its disk cache, once per machine); the candidates' compile caches start
cold on both sides. Only kernels launched as one 2-D grid over (N, M) tiles are supported: the sgemm
seeds."""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.bench.speed import run_search
from evolve.errors import EvolveError
from evolve.task.task import builtin_task

WARMUP = 3  # candidates in each tool's warm-up run, not counted


def kernel_tuner_rate(task_name: str, variant_name: str, budget: int, seed: int) -> dict[str, Any]:
    """Kernel Tuner's ``tune_kernel`` (random_sample, ``max_fevals=budget``) on the GPU."""
    import cupy as cp
    import numpy as np
    from kernel_tuner import tune_kernel

    task = builtin_task(task_name)
    variant = next((v for v in task.seeds() if v.name == variant_name), None)
    if variant is None or task_name != "sgemm":
        raise EvolveError(f"the head-to-head supports the sgemm seeds, not {task_name}/{variant_name}")
    spec, sizes = variant.spec, task.timing_sizes[0]
    inputs = task.make_inputs(cp, sizes, seed)
    ref = task.expected(cp, inputs, sizes)["c"].astype(cp.float32).get()
    a, b = (inputs[k].get() for k in ("a", "b"))
    m, n, k = (np.int32(sizes[x]) for x in "MNK")
    args = [a, b, np.zeros_like(ref), m, n, k]
    params = {t.name: list(t.values) for t in spec.tunables}
    threads = sorted({(c["BM"] // c["TM"]) * (c["BN"] // c["TN"]) for c in spec.space()})
    params["block_size_x"] = threads

    def valid(p: dict[str, int]) -> bool:
        cfg = {t.name: p[t.name] for t in spec.tunables}
        return spec.is_valid(cfg) and p["block_size_x"] == (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])

    def tune(fevals: int) -> tuple[list[dict[str, Any]], float]:
        np.random.seed(seed)
        random.seed(seed)
        with (tempfile.TemporaryDirectory() as cache, _env("CUPY_CACHE_DIR", cache),  # cold, as ours
              _whole_device_uuid()):
            t0 = time.perf_counter()
            results, _ = tune_kernel(
                spec.launches[0].kernel, variant.source, (int(n), int(m)), args, params,
                grid_div_x=["BN"], grid_div_y=["BM"], restrictions=valid, lang="cupy",
                answer=[None, None, ref, None, None, None], atol=1e-2,
                strategy="random_sample", strategy_options={"max_fevals": fevals},
                compiler_options=["--std=c++17"], quiet=True,
            )
            return results, time.perf_counter() - t0

    warmup_s = tune(WARMUP)[1]
    results, wall = tune(budget)
    ok = [r for r in results if isinstance(r.get("time"), float)]
    return {"candidates": len(results), "correct": len(ok), "wall_s": wall, "warmup_s": warmup_s,
            "per_min": 60 * len(results) / wall, "best_ms": min((r["time"] for r in ok), default=None)}


def evolve_rate(task_name: str, variant_name: str, budget: int, out: Path) -> dict[str, Any]:
    """cuda-evolve on the same space: a fresh process, random sampling without the climb (the
    same kind of draw as Kernel Tuner's), cold compile cache."""
    def search(n: int, name: str) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as cache, _env("EVOLVE_CACHE_DIR", cache):
            return run_search(task_name, out, n, "random", [
                f"task.seeds=[{task_name}/{variant_name}.cu]", "search.verify=false", "search.climb=false",
            ], name=f"{task_name}-{variant_name}-{name}")

    warmup_s = search(WARMUP, "warmup")["wall_s"]
    found = search(budget, "versus")
    tp = found["throughput"]
    return {"candidates": tp.candidates, "wall_s": found["wall_s"], "warmup_s": warmup_s,
            "per_min": 60 * tp.candidates / found["wall_s"], "per_min_in_search": tp.per_min,
            "shares": tp.shares(), "best_ms": found["best"]["time_ms"]}


@contextlib.contextmanager
def _whole_device_uuid() -> Iterator[None]:
    """CuPy returns the device UUID as a C string, cut at its first zero byte, and Kernel Tuner's
    CuPy backend fails ("bytes is not a 16-char string") on a GPU whose UUID holds one (one of the
    two H200s of a node, 2026-11-30). Kernel Tuner only records the UUID, so pad it back to 16."""
    import cupy as cp

    runtime = cp.cuda.runtime
    original = runtime.getDeviceProperties

    def padded(device: int) -> dict[str, Any]:
        props = original(device)
        return props | {"uuid": props["uuid"].ljust(16, b"\0")}

    runtime.getDeviceProperties = padded
    try:
        yield
    finally:
        runtime.getDeviceProperties = original


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    """An environment variable set for the duration (a compile cache pointed somewhere cold)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
