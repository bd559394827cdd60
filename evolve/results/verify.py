"""Step 5 of the protocol: before a winner is exported, measure it again in a fresh worker, with
fresh secret seeds and held-out correctness sizes it was never checked at. A kernel that
memorized anything about the search's worker, seeds or sizes fails here. The re-measured time is
the one exported; where it differs from the search's by more than the two measurements' IQRs,
the report says so (a search time biased by anything the search process did is not exported as
measured)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from evolve.evaluate.backend import Backend
from evolve.evaluate.measurement import Status
from evolve.evaluate.objective import Objective
from evolve.hardware import Hardware
from evolve.record.schema import Attr
from evolve.record.variants import VariantStore
from evolve.task.task import Task, size_label


@dataclass(frozen=True)
class Verification:
    trial: int
    status: str
    reason: str
    time_ms: float | None
    recorded_ms: float
    sizes: list[str]
    iqr_ms: float = 0.0  # of the re-measured time's samples ...
    recorded_iqr_ms: float = 0.0  # ... and of the search's

    @property
    def passed(self) -> bool:
        return self.status == Status.OK

    @property
    def reproduced(self) -> bool:
        """The two times differ by no more than their IQRs together."""
        return (self.time_ms is not None
                and abs(self.time_ms - self.recorded_ms) <= self.iqr_ms + self.recorded_iqr_ms)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "reproduced": self.reproduced}


def holdout_sizes(task: Task) -> list[dict[str, int]]:
    """The task's ``sizes.holdout``, else every correctness size grown by one in each dimension."""
    given = (task.config.get("sizes") or {}).get("holdout")
    if given:
        return [{k: int(v) for k, v in s.items()} for s in given]
    checked = {size_label(s) for s in task.correctness_sizes}
    out = []
    for s in task.correctness_sizes:
        grown = {k: v + 1 for k, v in s.items()}
        if size_label(grown) not in checked:
            out.append(grown)
    return out


def verify(backend: Backend, task: Task, hw: Hardware, objective: Objective, variants: VariantStore,
           ranked: list[FrozenTrial], tries: int = 3) -> list[Verification]:
    """Re-measure the best candidates (``record.ranked``) in order until one passes; every attempt
    is returned."""
    held = dataclasses.replace(task, correctness_sizes=tuple(holdout_sizes(task)))
    backend.start(held, hw)
    out = []
    try:
        for t in ranked[:tries]:
            variant = variants.get(t.user_attrs[Attr.VARIANT])
            m = backend.evaluate(variant, _ints(t.params), objective.sizes(held))
            out.append(Verification(
                trial=t.number, status=m.status.value, reason=m.reason,
                time_ms=objective.value_ms(m, held) if m.ok else None, recorded_ms=float(t.value),
                sizes=[size_label(s) for s in held.correctness_sizes],
                iqr_ms=next(iter(m.timings.values())).iqr_s * 1e3 if m.ok else 0.0,
                recorded_iqr_ms=float(t.user_attrs.get(Attr.IQR_MS, 0.0)),
            ))
            if m.ok:
                break
    finally:
        backend.close()
    return out


def _ints(params: Mapping[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in params.items()}
