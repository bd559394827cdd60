"""Evaluator throughput read off a run's study: candidates per minute, per GPU, and where the
time went. Trials carry what the evaluator measured (compile, correctness, timing); the rest of
a trial's busy span is storage and bookkeeping, and the gaps between trials are the sampler and
the Python loop. Works for any number of evaluators: each trial names its worker (host:pid), and
a resumed run is a new worker after a pause, so evaluators are counted by how many ran at once
and the time between sessions counts for none of them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from evolve.errors import EvolveError
from evolve.evaluate.measurement import NOT_COUNTED, Status
from evolve.record.schema import Attr
from evolve.record.storage import open_location


@dataclass(frozen=True)
class Throughput:
    candidates: int  # measured candidates (failed ones included, skipped ones not)
    evaluators: int  # evaluators at once, at most
    wall_s: float  # while at least one evaluator ran (a resumed run's pause not included)
    compile_s: float  # summed over candidates (and evaluators)
    check_s: float
    timing_s: float
    storage_s: float  # inside a trial's span, outside the evaluator
    other_s: float  # between trials: sampler, queue, Python
    evaluator_s: float = 0.0  # summed over evaluators, each from its first trial's start to its last's end
    replayed: bool = False  # replay backend: the evaluation times are the recording's, not this run's

    @property
    def per_min(self) -> float:
        return 60.0 * self.candidates / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def per_min_per_gpu(self) -> float:
        return 60.0 * self.candidates / self.evaluator_s if self.evaluator_s > 0 else 0.0

    def shares(self) -> dict[str, float]:
        """Fractions of the evaluators' time (none for a replay: its times were not spent here)."""
        if self.replayed:
            return {}
        parts = {"compile": self.compile_s, "correctness": self.check_s, "timing": self.timing_s,
                 "storage": self.storage_s, "other": self.other_s}
        return {k: v / self.evaluator_s if self.evaluator_s else 0.0 for k, v in parts.items()}

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "per_min": self.per_min, "per_min_per_gpu": self.per_min_per_gpu,
                "shares": self.shares()}

    def line(self) -> str:
        where = ("replay backend: evaluation times are the recording's, not this run's" if self.replayed
                 else "time: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in self.shares().items()))
        return (f"{self.candidates} candidates in {self.wall_s:.1f} s on {self.evaluators} evaluator(s): "
                f"{self.per_min:.1f}/min ({self.per_min_per_gpu:.1f}/min per GPU); {where}")


def measured(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Finished trials that measured a candidate (not skipped, re-queued or cut)."""
    done = (TrialState.COMPLETE, TrialState.FAIL)
    return [t for t in trials if t.state in done and t.datetime_start and t.datetime_complete
            and "eval_s" in t.user_attrs and Status(t.user_attrs.get("status", "ok")) not in NOT_COUNTED]


def throughput(trials: list[FrozenTrial], replayed: bool = False) -> Throughput:
    """``replayed``: the study was run on the replay backend (its ``backend`` attribute)."""
    ts = measured(trials)
    if not ts:
        return Throughput(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, replayed=replayed)
    sessions = _sessions(ts)
    evaluator_s = sum(end - start for start, end in sessions)
    spans = _busy_s(ts)
    evals = sum(float(t.user_attrs["eval_s"]) for t in ts)
    compile_s = sum(float(t.user_attrs.get("compile_s", 0.0)) for t in ts)
    check_s = sum(float(t.user_attrs.get("check_s", 0.0)) for t in ts)
    return Throughput(
        candidates=len(ts), evaluators=_most_at_once(sessions), wall_s=_covered_s(sessions),
        compile_s=compile_s, check_s=check_s, timing_s=max(evals - compile_s - check_s, 0.0),
        storage_s=max(spans - evals, 0.0), other_s=max(evaluator_s - spans, 0.0),
        evaluator_s=evaluator_s, replayed=replayed,
    )


def _sessions(ts: list[FrozenTrial]) -> list[tuple[float, float]]:
    """Each evaluator's (first trial's start, last trial's end), in seconds."""
    by_evaluator: dict[object, list[FrozenTrial]] = {}
    for t in ts:
        by_evaluator.setdefault(t.user_attrs.get(Attr.EVALUATOR, "?"), []).append(t)
    return [(min(t.datetime_start.timestamp() for t in mine),  # type: ignore[union-attr]
             max(t.datetime_complete.timestamp() for t in mine))  # type: ignore[union-attr]
            for mine in by_evaluator.values()]


def _most_at_once(sessions: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in sessions] + [(end, -1) for _, end in sessions])
    running = most = 0
    for _, step in events:  # an end sorts before a start at the same moment
        running += step
        most = max(most, running)
    return most


def _covered_s(sessions: list[tuple[float, float]]) -> float:
    """Seconds during which at least one evaluator ran."""
    covered, reach = 0.0, -float("inf")
    for start, end in sorted(sessions):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def _busy_s(ts: list[FrozenTrial]) -> float:
    """Seconds the trials kept their evaluators busy: each from its start, or from the end of the
    same worker's previous trial if later. A trial queued ahead (the search's look-ahead) starts
    while its predecessor is still being measured; counting that wait would count time twice."""
    by_evaluator: dict[object, list[FrozenTrial]] = {}
    for t in ts:
        by_evaluator.setdefault(t.user_attrs.get(Attr.EVALUATOR, "?"), []).append(t)
    busy = 0.0
    for mine in by_evaluator.values():
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
    p.add_argument("storage", help="storage URL (sqlite:///runs/evolve.db, postgresql://...), SQLite file "
                                   "or journal file")
    p.add_argument("study", nargs="+", help="run name(s)")
    a = p.parse_args(argv)
    try:
        storage = open_location(a.storage)
        names = sorted(s.study_name for s in storage.get_all_studies() if not s.study_name.startswith("_"))
        for name in a.study:
            if name not in names:
                raise EvolveError(f"no run named {name!r} in {a.storage} "
                                  f"(runs: {', '.join(names) or 'none'})")
            study = optuna.load_study(study_name=name, storage=storage)
            tp = throughput(study.get_trials(deepcopy=False), study.user_attrs.get("backend") == "replay")
            print(f"{name}: {tp.line()}")
    except EvolveError as exc:
        print(f"throughput: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
