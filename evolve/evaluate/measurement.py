"""What evaluating one candidate produced: a status, timings, resources and diagnostics.

Measurements cross process boundaries (worker to search loop) and are recorded for replay, so
they are plain data with a dict form.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    WRONG = "wrong"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"  # refused before running: malformed spec, forbidden include, ...
    NOT_RECORDED = "not_recorded"  # replay backend: nobody measured this candidate
    INTERRUPTED = "interrupted"  # the run stopped while measuring; retried on resume
    OVER_BUDGET = "over_budget"  # queued beyond the budget by a process that could not know
    DUPLICATE = "duplicate"  # the same candidate was queued earlier by another process
    NO_CANDIDATE = "no_candidate"  # another process emptied the queue just before this one asked


NOT_COUNTED = frozenset({Status.INTERRUPTED, Status.OVER_BUDGET, Status.DUPLICATE, Status.NO_CANDIDATE})
# the wrong verdicts that are no matter of tolerance (evaluate/gpu/checking.py words them)
_BROKE_CONTRACT = re.compile(r"(wrote out of bounds of|input \S+ was modified) ")


def inaccurate(status: str | None, reason: str | None) -> bool:
    """Judged wrong on its values alone: what a kernel with a real bug and an honest kernel under a
    tolerance tighter than its arithmetic allows both get (not an out-of-bounds write or a
    modified input)."""
    return status == Status.WRONG and not _BROKE_CONTRACT.match(reason or "")


@dataclass(frozen=True)
class TimingStats:
    median_s: float
    iqr_s: float
    min_s: float
    n: int

    @classmethod
    def of(cls, samples_s: list[float]) -> TimingStats:
        xs = sorted(samples_s)
        return cls(
            median_s=_quantile(xs, 0.5),
            iqr_s=_quantile(xs, 0.75) - _quantile(xs, 0.25),
            min_s=xs[0],
            n=len(xs),
        )

    @property
    def rel_iqr(self) -> float:
        return self.iqr_s / self.median_s if self.median_s > 0 else math.inf


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted data (NumPy's default method)."""
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Measurement:
    status: Status
    reason: str = ""
    timings: dict[str, TimingStats] = field(default_factory=dict)  # by size label
    resources: dict[str, dict[str, float]] = field(default_factory=dict)  # by kernel name
    compile_s: float = 0.0
    check_s: float = 0.0
    time_s: float = 0.0
    log: str = ""  # sanitized compiler output, for the user and (later) the LLM
    profile: dict[str, Any] | None = None  # Nsight Compute's figures (evolve.evaluate.profile), where taken

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        return cls(
            status=Status(d["status"]),
            reason=d.get("reason", ""),
            timings={k: TimingStats(**v) for k, v in (d.get("timings") or {}).items()},
            resources=d.get("resources") or {},
            compile_s=d.get("compile_s", 0.0),
            check_s=d.get("check_s", 0.0),
            time_s=d.get("time_s", 0.0),
            log=d.get("log", ""),
            profile=d.get("profile"),
        )

    @classmethod
    def failed(cls, status: Status, reason: str, **kw: Any) -> Measurement:
        return cls(status=status, reason=reason, **kw)
