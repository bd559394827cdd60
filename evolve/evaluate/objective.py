"""The number Optuna minimizes, computed from a measurement (milliseconds)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evolve.errors import EvolveError
from evolve.evaluate.measurement import Measurement
from evolve.task.task import Task, size_label

REDUCTIONS = ("first", "geomean")


@dataclass(frozen=True)
class Objective:
    name: str
    reduce: str  # "first": median at the first timing size; "geomean": over all timing sizes

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> Objective:
        if cfg.get("reduce") not in REDUCTIONS:
            raise EvolveError(f"objective.reduce must be one of {REDUCTIONS}, got {cfg.get('reduce')!r}")
        return cls(name=str(cfg["name"]), reduce=str(cfg["reduce"]))

    def sizes(self, task: Task) -> list[dict[str, int]]:
        return list(task.timing_sizes[:1] if self.reduce == "first" else task.timing_sizes)

    def value_ms(self, m: Measurement, task: Task) -> float:
        medians = [m.timings[size_label(s)].median_s * 1e3 for s in self.sizes(task)]
        return math.exp(sum(math.log(x) for x in medians) / len(medians))
