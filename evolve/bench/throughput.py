"""Evaluator throughput read off a run's study: candidates per minute, per GPU, and where the
time went. Trials carry what the evaluator measured (compile, correctness, timing); the rest of
a trial's busy span is storage and bookkeeping, and the gaps between trials are the sampler and
the Python loop. Works for any number of evaluators: each trial names its worker.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from evolve.measurement import NOT_COUNTED, Status


@dataclass(frozen=True)
class Throughput:
    candidates: int  # measured candidates (failed ones included, skipped ones not)
    workers: int
    wall_s: float  # first trial's start to last trial's end
    compile_s: float  # summed over candidates (and workers)
    check_s: float
    timing_s: float
    storage_s: float  # inside a trial's span, outside the evaluator
    other_s: float  # between trials: sampler, queue, Python

    @property
    def per_min(self) -> float:
        return 60.0 * self.candidates / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def per_min_per_gpu(self) -> float:
        return self.per_min / max(self.workers, 1)

    def shares(self) -> dict[str, float]:
        """Fractions of the evaluators' busy time (workers x wall)."""
        total = self.wall_s * max(self.workers, 1)
        parts = {"compile": self.compile_s, "correctness": self.check_s, "timing": self.timing_s,
                 "storage": self.storage_s, "other": self.other_s}
        return {k: v / total if total else 0.0 for k, v in parts.items()}

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "per_min": self.per_min, "per_min_per_gpu": self.per_min_per_gpu,
                "shares": self.shares()}

    def line(self) -> str:
        s = self.shares()
        return (f"{self.candidates} candidates in {self.wall_s:.1f} s on {self.workers} evaluator(s): "
                f"{self.per_min:.1f}/min ({self.per_min_per_gpu:.1f}/min per GPU); time: "
                + ", ".join(f"{k} {100 * v:.0f}%" for k, v in s.items()))


def measured(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Finished trials that measured a candidate (not skipped, re-queued or cut)."""
    done = (TrialState.COMPLETE, TrialState.FAIL)
    return [t for t in trials if t.state in done and t.datetime_start and t.datetime_complete
            and "eval_s" in t.user_attrs and Status(t.user_attrs.get("status", "ok")) not in NOT_COUNTED]


def throughput(trials: list[FrozenTrial]) -> Throughput:
    ts = measured(trials)
    if not ts:
        return Throughput(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    workers = {t.user_attrs.get("worker", "?") for t in ts}
    start = min(t.datetime_start for t in ts)  # type: ignore[type-var]
    end = max(t.datetime_complete for t in ts)  # type: ignore[type-var]
    wall = (end - start).total_seconds()
    spans = _busy_s(ts)
    evals = sum(float(t.user_attrs["eval_s"]) for t in ts)
    compile_s = sum(float(t.user_attrs.get("compile_s", 0.0)) for t in ts)
    check_s = sum(float(t.user_attrs.get("check_s", 0.0)) for t in ts)
    return Throughput(
        candidates=len(ts), workers=len(workers), wall_s=wall, compile_s=compile_s, check_s=check_s,
        timing_s=max(evals - compile_s - check_s, 0.0), storage_s=max(spans - evals, 0.0),
        other_s=max(wall * len(workers) - spans, 0.0),
    )


def _busy_s(ts: list[FrozenTrial]) -> float:
    """Seconds the trials kept their workers busy: each from its start, or from the end of the
    same worker's previous trial if later. A trial queued ahead (the search's look-ahead) starts
    while its predecessor is still being measured; counting that wait would count time twice."""
    by_worker: dict[object, list[FrozenTrial]] = {}
    for t in ts:
        by_worker.setdefault(t.user_attrs.get("worker", "?"), []).append(t)
    busy = 0.0
    for mine in by_worker.values():
        free = None
        for t in sorted(mine, key=lambda t: t.datetime_complete):  # type: ignore[arg-type, return-value]
            begin = t.datetime_start if free is None else max(t.datetime_start, free)  # type: ignore[type-var]
            busy += max((t.datetime_complete - begin).total_seconds(), 0.0)  # type: ignore[operator]
            free = t.datetime_complete
    return busy


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m evolve.bench.throughput",
        description="Candidates per minute (per GPU) of a run, and where its time went.")
    p.add_argument("storage", help="storage URL (sqlite:///runs/evolve.db, postgresql://...) or journal file")
    p.add_argument("study", nargs="+", help="run name(s)")
    a = p.parse_args(argv)
    storage: str | optuna.storages.BaseStorage = a.storage
    if "://" not in a.storage:
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(a.storage))
    for name in a.study:
        study = optuna.load_study(study_name=name, storage=storage)
        print(f"{name}: {throughput(study.get_trials(deepcopy=False)).line()}")


if __name__ == "__main__":
    main()
