"""Kernel speed per built-in task: cuda-evolve's search under a stated budget, run as a user
runs it, then its best kernel, the seeds at their defaults and the peers checked against the
float64 reference and timed side by side in one process with one protocol."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from evolve import dtypes
from evolve.bench.peers import cupy_peers, torch_peers, triton_peers, tvm_peers
from evolve.bench.throughput import throughput
from evolve.bench.timer import TimerSettings, time_side_by_side
from evolve.errors import EvolveError
from evolve.hardware import Hardware
from evolve.task.task import Task, builtin_task, size_label

log = logging.getLogger(__name__)


def run_search(task: str, out: Path, budget: int, sampler: str, overrides: list[str],
               name: str | None = None) -> dict[str, Any]:
    """``evolve`` as a subprocess (no LLM: the bench measures the tuner, reproducibly), into the
    bench's own storage; returns best.json, the wall time and the run's throughput."""
    name = name or f"{task}-{sampler}-{budget}"
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "runs" / name
    storage = f"sqlite:///{out}/bench.db"
    cmd = [sys.executable, "-m", "evolve", f"task={task}", "llm=none", f"search.n_trials={budget}",
           f"search.sampler={sampler}", "search.seed=0", "search.progress=false",
           f"storage.url={storage}", f"storage.artifacts={out}/artifacts",
           f"run.name={name}", f"run.dir={run_dir}", *overrides]
    t0 = time.perf_counter()
    with open(out / f"search-{name}.log", "w") as logf:
        rc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=os.environ.copy()).returncode
    wall = time.perf_counter() - t0
    if rc != 0 or not (run_dir / "best.json").is_file():
        raise EvolveError(f"the search on {task} failed (exit {rc}); see {out}/search-{name}.log")
    study = optuna.load_study(study_name=name, storage=storage)
    return {"best": json.loads((run_dir / "best.json").read_text()), "wall_s": wall,
            "throughput": throughput(study.get_trials(deepcopy=False),
                                     replayed=study.user_attrs.get("backend") == "replay")}


def side_by_side(task: Task, hw: Hardware, best: dict[str, Any], compile_modes: list[str],
                 timer: TimerSettings, sizes: Mapping[str, int],
                 extra: Mapping[str, tuple[str, str, dict[str, int]]] | None = None) -> dict[str, Any]:
    """Every implementation of the task at one of its timing sizes on the same inputs: checked,
    then timed interleaved. Rows carry time, IQR, throughput and the fraction of the ceilings.
    ``extra``: more kernels, name -> (kind, source, tunables), e.g. an evolved run's best."""
    import cupy as cp

    from evolve.evaluate.gpu.harness import GpuEvaluator
    from evolve.evaluate.gpu.timing import TimingSettings

    inputs = task.make_inputs(cp, sizes, seed=20261129)
    refs = task.expected(cp, inputs, sizes)
    outputs = {a.name: cp.empty(task.shape(a, sizes), dtypes.storage(a.dtype)) for a in task.outputs}
    arrays = {**inputs, **outputs}
    ev = GpuEvaluator(task, hw, TimingSettings(), secret=int.from_bytes(os.urandom(8), "little") >> 1)

    impls: dict[str, tuple[str, Any]] = {}
    seeds = {v.id: v for v in task.seeds()}
    for v in seeds.values():
        impls[f"seed {v.name} (defaults)"] = ("seed", ev.launcher(v.source, v.spec.default, sizes, arrays))
    found = seeds.get(best["variant"]["id"])
    if found is None:
        raise EvolveError("the bench times seeds and their tunings only; the best kernel is not a seed")
    tun = {k: int(v) for k, v in best["tunables"].items()}
    found_name = f"cuda-evolve: {found.name} " + _tunables(tun)
    impls[found_name] = ("found", ev.launcher(found.source, tun, sizes, arrays))
    for name, (kind, source, tunables) in (extra or {}).items():
        impls[name] = (kind, ev.launcher(source, tunables, sizes, arrays))
    peers = {**torch_peers(task, arrays, compile_modes), **triton_peers(task, arrays),
             **tvm_peers(task, arrays), **cupy_peers(task, arrays)}
    impls |= {name: ("peer", fn) for name, fn in peers.items()}

    rows, timed = [], {}
    for name, (kind, fn) in impls.items():
        reason = check(task, sizes, fn, outputs, refs)
        rows.append({"name": name, "kind": kind, "correct": reason is None, "error": reason})
        if reason is None:
            timed[name] = fn
        else:
            log.warning("%s on %s: %s", name, task.name, reason)
    stats = time_side_by_side(timed, hw.l2_bytes, timer)
    nbytes, flops = task.bytes(sizes), task.flops(sizes)
    peak = 0.0 if task.peak == "memory" else hw.peak(task.peak)  # the task's (fp16 tensor cores, ...)
    for r in rows:
        st = stats.get(r["name"])
        if st is None:
            continue
        t = st.median_s
        r.update(ms=t * 1e3, iqr_ms=st.iqr_s * 1e3, samples=st.n, gbps=nbytes / t / 1e9,
                 tflops=flops / t / 1e12, pct_ceiling=100 * nbytes / t / hw.bandwidth_ceiling,
                 pct_copy=100 * nbytes / t / hw.copy_bandwidth_bps if hw.copy_bandwidth_bps else None,
                 pct_peak=100 * flops / t / peak if peak else None)
    t_found = stats[found_name].median_s if found_name in stats else None
    speedups = {r["name"]: stats[r["name"]].median_s / t_found
                for r in rows if r["kind"] != "found" and r["name"] in stats and t_found}
    return {"task": task.name, "size": size_label(sizes), "bytes": nbytes, "flops": flops,
            "found": found_name, "rows": rows, "speedup_of_found": speedups}


def check(task: Task, sizes: Mapping[str, int], fn: Callable[[], Any], outputs: Mapping[str, Any],
          refs: Mapping[str, Any]) -> str | None:
    """Why `fn` does not compute the task (None: it does). It writes `outputs` (filled first with
    what the evaluator fills them with: NaN, NaN's bits for bfloat16) or returns its output (a
    bfloat16 tensor as its bits); a peer that cannot run the task is reported, not fatal."""
    import cupy as cp

    from evolve.task.correctness import compare_all

    fills = {a.name: dtypes.unwritten(a.dtype, np.random.default_rng(0)) for a in task.outputs}
    for a in task.outputs:
        outputs[a.name].fill(fills[a.name])
    try:
        got = fn()
        cp.cuda.Device().synchronize()
        out = task.outputs[0]
        if got is not None and out.dtype == "bfloat16":  # CuPy has no bfloat16: pass its bits
            import torch

            got = got.view(torch.int16)
        made = outputs if got is None else {
            out.name: cp.from_dlpack(got).view(dtypes.storage(out.dtype)).reshape(task.shape(out, sizes))}
        return compare_all(cp, task, made, refs, fills, sizes)
    except Exception as exc:
        return f"failed: {str(exc).splitlines()[0]}"


def evolved(task: Task, run_dir: Path, out: Path, budget: int, sampler: str,
            overrides: list[str]) -> dict[str, tuple[str, str, dict[str, int]]]:
    """An evolve run's best kernel, and the run's own seeds tuned without an LLM under the bench's
    budget: what the LLM added over tuning alone. Each is launched from its best.cu, whose
    tunables and defines are baked in as the same #defines the launch passes."""
    best = _finished(run_dir, task)
    seeds = [str(s) for s in best["task_config"]["seeds"]]
    name = f"{task.name}-{sampler}-{budget}-{best['run']}-seeds"
    run_search(task.name, out, budget, sampler, [*overrides, f"task.seeds=[{','.join(seeds)}]"], name=name)
    alone_dir = out / "runs" / name
    alone = _finished(alone_dir, task)
    rows = {}
    for label, kind, b, d in (
            (f"evolved ({best['run']}): {best['variant']['name']}", "evolved", best, run_dir),
            (f"{alone['variant']['name']} tuned alone ({budget} trials)", "seed tuned", alone, alone_dir)):
        tun = {k: int(v) for k, v in b["tunables"].items()}
        rows[f"{label} {_tunables(tun)}"] = (kind, _best_source(d), tun)
    return rows


def _finished(run_dir: Path, task: Task) -> dict[str, Any]:
    try:
        best = json.loads((run_dir / "best.json").read_text())
    except (OSError, ValueError) as exc:
        raise EvolveError(f"speed.runs: {run_dir} is not a finished evolve run ({exc})") from None
    if best.get("task") != task.name:
        raise EvolveError(f"speed.runs: {run_dir} is a run of {best.get('task')}, not {task.name}")
    return best


def _best_source(run_dir: Path) -> str:
    from evolve.kernel.spec import SpecError, Variant

    try:
        return Variant.parse((run_dir / "best.cu").read_text(), name="best").source
    except (OSError, SpecError) as exc:
        raise EvolveError(f"speed.runs: {run_dir}/best.cu: {exc}") from None


def _tunables(tunables: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in tunables.items())


def kernel_speed(tasks: list[str], out: Path, hw: Hardware, budget: int, sampler: str,
                 compile_modes: list[str], timer: TimerSettings, overrides: list[str],
                 runs: Mapping[str, str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Task by task and size by size, so that the caller can keep what is done if the bench is
    cut short: a task's first timing size is keyed by its name, each further one (hgemm's model
    shapes) by ``name (size)``. ``runs``: task -> an evolve run's directory, timed beside the rest
    (``evolved``)."""
    for name in tasks:
        log.info("speed: %s: searching (%d trials, %s)", name, budget, sampler)
        found = run_search(name, out, budget, sampler, overrides)
        log.info("speed: %s: %s", name, found["throughput"].line())
        task = builtin_task(name)
        runs = runs or {}
        extra = evolved(task, Path(runs[name]), out, budget, sampler, overrides) if name in runs else {}
        search = {"budget": budget, "sampler": sampler, "wall_s": found["wall_s"],
                  "best_ms_in_search": found["best"]["time_ms"], "throughput": found["throughput"].to_dict()}
        for i, sizes in enumerate(task.timing_sizes):
            log.info("speed: %s at %s: timing side by side", name, size_label(sizes))
            key = name if i == 0 else f"{name} ({size_label(sizes)})"
            yield key, {**side_by_side(task, hw, found["best"], compile_modes, timer, sizes, extra),
                        "search": search}
