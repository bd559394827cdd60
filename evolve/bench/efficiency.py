"""Search efficiency: how fast each method finds a fast configuration of one recorded space.

Every configuration of a seed variant was measured once on real hardware (the recordings shipped
under ``evolve/recordings``), so a search can be replayed without a GPU: cuda-evolve's per-variant
tuner (:class:`~evolve.search.tuner.VariantTuner` with an Optuna sampler, exactly as a run uses it) and
Kernel Tuner's strategies (its simulation mode, replaying a cache file written from the same
recording) see the same numbers. Each method runs once per seed; a run yields the measured value
of each evaluation in order, and the statistics compare best-found (as a fraction of the space's
optimum) against evaluations spent.

    evolve-bench sections=[efficiency] efficiency.budget=100 efficiency.seeds=20
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import random
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from evolve.errors import EvolveError
from evolve.evaluate.objective import Objective
from evolve.evaluate.recording import Recording, builtin_path
from evolve.kernel.spec import LaunchSpec, candidate_key
from evolve.search.samplers import make_sampler
from evolve.search.tuner import VariantTuner
from evolve.task.task import builtin_task

OURS = ("tpe", "random", "cmaes", "gp", "qmc")
THEIRS = ("random_sample", "genetic_algorithm", "bayes_opt", "simulated_annealing", "greedy_ils", "pso",
          "diff_evo")
TARGET = 0.95  # "found": within 5% of the optimum
LATENCY = Objective(name="latency", reduce="first")  # what a run minimizes by default

Values = list[float | None]  # measured ms per evaluation, in order; None: the candidate failed


@dataclass(frozen=True)
class RecordedSpace:
    """One variant's whole valid space with the recorded value (ms) of every configuration."""

    hardware: str
    task: str
    variant: str
    spec: LaunchSpec
    times: dict[tuple[int, ...], float | None]  # values in the spec's tunable order -> ms (None: failed)

    @property
    def label(self) -> str:
        return f"{self.task}/{self.variant}"

    @property
    def size(self) -> int:
        return len(self.times)

    @property
    def optimum(self) -> float:
        return min(v for v in self.times.values() if v is not None)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.spec.tunables]

    def key(self, cfg: dict[str, int]) -> tuple[int, ...]:
        return tuple(cfg[n] for n in self.names)

    @classmethod
    def load(cls, hardware: str, task: str, variant: str) -> RecordedSpace:
        """From the built-in recording; refuses a space the recording does not cover entirely,
        since a replayed search must be able to measure whatever it proposes."""
        t = builtin_task(task)
        seeds = {v.name: v for v in t.seeds()}
        if variant not in seeds:
            raise EvolveError(f"task {task} has no variant {variant!r}; its seeds: {', '.join(seeds)}")
        v = seeds[variant]
        rec = Recording.load([builtin_path(hardware, task)], hardware, task)
        space = v.spec.space()
        found = [(c, rec.measurements.get(candidate_key(v.id, c))) for c in space]
        have = [(c, m) for c, m in found if m is not None]
        if len(have) < len(space):
            raise EvolveError(
                f"the {hardware} recording of {task} has {len(have)} of the {len(space)} configurations of "
                f"variant {variant}; a replayed search needs all of them")
        names = [tn.name for tn in v.spec.tunables]
        times = {tuple(c[n] for n in names): LATENCY.value_ms(m, t) if m.ok else None for c, m in have}
        if all(x is None for x in times.values()):
            raise EvolveError(f"every recorded configuration of {task}/{variant} on {hardware} failed")
        return cls(hardware, task, variant, v.spec, times)


# --- the methods -------------------------------------------------------------------------------------


def run_ours(space: RecordedSpace, sampler: str, budget: int, seed: int, climb: bool = True) -> Values:
    """cuda-evolve's tuner with one Optuna sampler, as a run drives it: the variant's default
    first, then the tuner's proposals; each is one (counted) evaluation."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tuner = VariantTuner(space.label, space.spec, make_sampler(sampler, seed), seed, climb)
            values: Values = []
            cfg: dict[str, int] | None = space.spec.default
            while cfg is not None and len(values) < budget:
                value = space.times[space.key(cfg)]
                tuner.observe(cfg, value)
                values.append(value)
                cfg = tuner.propose() if len(values) < budget else None
    finally:
        optuna.logging.set_verbosity(verbosity)
    return values


def write_cache(space: RecordedSpace, path: Path) -> Path:
    """The recording as a Kernel Tuner cache file (the format ``util.read_cache`` reads)."""
    cache = {}
    for key, ms in space.times.items():
        entry: dict[str, Any] = dict(zip(space.names, key, strict=True))
        entry |= {"time": ms, "times": [ms]} if ms is not None else {"time": "RuntimeFailedConfig"}
        entry |= {"compile_time": 0.0, "verification_time": 0.0, "benchmark_time": 0.0}
        cache[",".join(map(str, key))] = entry
    doc = {
        "device_name": space.hardware, "kernel_name": _kernel_name(space), "problem_size": 1,
        "tune_params_keys": space.names, "tune_params": _tune_params(space), "objective": "time",
        "cache": cache,
    }
    path.write_text(json.dumps(doc))
    return path


def run_kernel_tuner(space: RecordedSpace, strategy: str, budget: int, seed: int, workdir: Path) -> Values:
    """One Kernel Tuner strategy replaying the recording. Kernel Tuner counts each unique
    configuration once and serves repeats from its cache for free, so repeats are dropped here."""
    import kernel_tuner

    workdir.mkdir(parents=True, exist_ok=True)
    # one file per process: parallel runs must not read a file another is rewriting
    cache = write_cache(space, workdir / f"{space.hardware}-{space.task}-{space.variant}-{os.getpid()}.json")
    random.seed(seed)
    np.random.seed(seed)
    options = {"max_fevals": budget, **_fit_population(strategy, space)}
    if strategy == "brute_force":  # takes no options: it walks the whole space, cut to the budget below
        options = {}
    with warnings.catch_warnings(), _seeded_latin_hypercube():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            _kernel_name(space), "", 1, [], _tune_params(space), restrictions=space.spec.is_valid,
            cache=str(cache), simulation_mode=True, strategy=strategy, strategy_options=options,
            quiet=True, seed=seed)
    values: Values = []
    seen: set[tuple[int, ...]] = set()
    for r in results:
        key = tuple(r[n] for n in space.names)
        if key not in seen:
            seen.add(key)
            values.append(None if "__error__" in r else float(r["time"]))
    return values[:budget]


def _fit_population(strategy: str, space: RecordedSpace) -> dict[str, Any]:
    """Kernel Tuner's default first populations can exceed a small space (bayes_opt: 20, diff_evo:
    16 per tunable, firefly_algorithm: 20), and it then fails (a ValueError, an IndexError); its
    Latin hypercube sample is at most half the space, so shrink them to that. Defaults that fit stay."""
    half = space.size // 2
    dims = sum(len(t.values) > 1 for t in space.spec.tunables)
    if strategy in ("bayes_opt", "firefly_algorithm") and half < 20:
        return {"popsize": max(half, 1)}
    if strategy == "diff_evo" and half < 16 * dims:
        return {"popsize": max(half, 1), "popsize_times_dimensions": False}
    return {}


def _kernel_name(space: RecordedSpace) -> str:
    return f"{space.task}_{space.variant}"


def _tune_params(space: RecordedSpace) -> dict[str, list[int]]:
    return {t.name: list(t.values) for t in space.spec.tunables}


@contextlib.contextmanager
def _seeded_latin_hypercube() -> Iterator[None]:
    """Kernel Tuner's bayes_opt and diff_evo draw their initial Latin hypercube with SciPy's default,
    fresh OS entropy, so no seed reaches them; this draws that seed from NumPy's global RNG
    (seeded per run) instead, making every strategy reproducible."""
    import scipy.stats.qmc as qmc
    from kernel_tuner.strategies import bayes_opt

    original = qmc.LatinHypercube

    class Seeded(original):  # type: ignore[misc, valid-type]
        def __init__(self, d: int, **kw: Any):
            kw.setdefault("seed", np.random.randint(2**31))
            super().__init__(d, **kw)

    qmc.LatinHypercube = bayes_opt.LatinHypercube = Seeded
    try:
        yield
    finally:
        qmc.LatinHypercube = bayes_opt.LatinHypercube = original


# --- statistics --------------------------------------------------------------------------------------


def best_curve(values: Values, optimum: float, budget: int) -> np.ndarray:
    """Optimum / best-so-far after each evaluation (0 before the first success), held at its last
    value once the run stops, so runs that end early still average over the whole budget."""
    best = np.minimum.accumulate([math.inf if v is None else v for v in values[:budget]] or [math.inf])
    curve = optimum / best
    return np.concatenate([curve, np.full(budget - len(curve), curve[-1])])[:budget]


def band(curves: np.ndarray, level: float = 0.95, resamples: int = 2000) -> tuple[np.ndarray, ...]:
    """Mean over seeds (rows) and a percentile-bootstrap confidence band for it: it needs no
    normality and, unlike a t-interval, stays inside [0, 1] like the curves do."""
    rng = np.random.default_rng(0)
    means = curves[rng.integers(0, len(curves), (resamples, len(curves)))].mean(axis=1)
    tail = 100 * (1 - level) / 2
    return curves.mean(axis=0), np.percentile(means, tail, axis=0), np.percentile(means, 100 - tail, axis=0)


def evals_to_reach(values: Values, optimum: float, fraction: float = TARGET) -> int | None:
    """Evaluations until one reaches `fraction` of the optimum (optimum / value), or None."""
    for i, v in enumerate(values, 1):
        if v is not None and optimum / v >= fraction:
            return i
    return None


def summarize(runs: list[Values], optimum: float, budget: int) -> dict[str, Any]:
    """One method over all seeds. A seed that never reaches the target counts as budget + 1
    evaluations, so the median stays defined (and says "not within budget" when above it)."""
    curves = np.array([best_curve(v, optimum, budget) for v in runs])
    mean, low, high = band(curves)
    reached = [evals_to_reach(v[:budget], optimum) for v in runs]
    return {
        "mean": mean.tolist(), "low": low.tolist(), "high": high.tolist(),
        "median_evals_to_95": float(np.median([budget + 1 if n is None else n for n in reached])),
        "reached": sum(n is not None for n in reached) / len(runs),
        "final": float(mean[-1]),
        "evaluations": float(np.mean([len(v) for v in runs])),
    }


# --- the comparison ----------------------------------------------------------------------------------


def compare(space: RecordedSpace, ours: list[str], theirs: list[str], budget: int, seeds: int,
            workdir: Path, jobs: int | None = None, climb: bool = True) -> dict[str, Any]:
    """Every method on seeds 0..seeds-1, run in `jobs` processes (default: one per CPU); ``climb``
    as ``search.climb``. A method that fails is reported with its error instead of a curve;
    ``wall_s`` sums its runs' own times.
    `plot` and `table` take these results by space label: ``{space.label: compare(space, ...)}``."""
    methods = [("cuda-evolve", s) for s in ours] + [("kernel_tuner", s) for s in theirs]
    out: dict[str, Any] = {}
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_import_kernel_tuner) as pool:
        futures = {m: [pool.submit(_timed_run, *m, space, budget, seed, workdir, climb)
                       for seed in range(seeds)] for m in methods}
        for (kind, method), runs in futures.items():
            name = f"{kind}:{method}"
            try:
                done = [f.result() for f in runs]
            except Exception as exc:  # one strategy failing must not lose the others' results
                out[name] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0], "wall_s": 0.0}
                continue
            out[name] = summarize([v for v, _ in done], space.optimum, budget) | {
                "wall_s": sum(s for _, s in done)}
    return {
        "hardware": space.hardware, "task": space.task, "variant": space.variant, "size": space.size,
        "optimum_ms": space.optimum, "budget": budget, "seeds": seeds, "methods": out,
    }


def _import_kernel_tuner() -> None:
    """Once per worker (with scikit-learn, for bayes_opt), so that a run's time is its own."""
    with contextlib.suppress(ImportError):
        import kernel_tuner.strategies.bayes_opt  # noqa: F401


def _timed_run(kind: str, method: str, space: RecordedSpace, budget: int, seed: int,
               workdir: Path, climb: bool) -> tuple[Values, float]:
    start = time.perf_counter()
    if kind == "cuda-evolve":
        values = run_ours(space, method, budget, seed, climb)
    else:
        values = run_kernel_tuner(space, method, budget, seed, workdir)
    return values, time.perf_counter() - start


def table(results: dict[str, Any]) -> str:
    """Markdown, one table per space (results by space label)."""
    parts = []
    for label, r in results.items():
        rows = [
            f"### {label} on {r['hardware']}: {r['size']} configurations, optimum {r['optimum_ms']:.4g} ms, "
            f"budget {r['budget']}, {r['seeds']} seeds",
            "",
            f"| method | median evaluations to {TARGET:.0%} | seeds reaching it | best at {r['budget']} "
            "| evaluations used | seconds (all seeds) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, m in r["methods"].items():
            if "error" in m:
                rows.append(f"| {name} | failed: {m['error'].replace('|', '/')} | | | | {m['wall_s']:.1f} |")
                continue
            median = m["median_evals_to_95"]
            shown = f"> {r['budget']}" if median > r["budget"] else f"{median:g}"
            rows.append(f"| {name} | {shown} | {m['reached']:.0%} | {m['final']:.1%} | "
                        f"{m['evaluations']:.0f} | {m['wall_s']:.1f} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def plot(results: dict[str, Any], path: Path) -> Path:
    """One panel per space (results by space label): mean best-found, % of optimum, with its band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(7 * len(results), 5), squeeze=False)
    for ax, (label, r) in zip(axes[0], results.items(), strict=True):
        x = np.arange(1, r["budget"] + 1)
        for name, m in r["methods"].items():
            if "error" in m:
                continue
            style = "-" if name.startswith("cuda-evolve") else "--"
            (line,) = ax.plot(x, 100 * np.array(m["mean"]), style, label=name, linewidth=1.5)
            ax.fill_between(x, 100 * np.array(m["low"]), 100 * np.array(m["high"]), color=line.get_color(),
                            alpha=0.15, linewidth=0)
        ax.axhline(100 * TARGET, color="gray", linestyle=":", linewidth=1)
        ax.set(title=f"{label} ({r['size']} configurations, {r['seeds']} seeds)", xlabel="evaluations",
               ylabel="best found, % of optimum", xlim=(1, r["budget"]), ylim=(None, 101))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
