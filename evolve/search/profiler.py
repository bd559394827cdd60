"""The evaluator's half of ``evolution.profile``: each population member's Nsight Compute profile
(``evolve.evaluate.profile``) taken and kept in the study, so a proposer anywhere reads it."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import optuna

from evolve.errors import EvolveError
from evolve.kernel.spec import Variant
from evolve.record.schema import StudyAttr

log = logging.getLogger(__name__)

AGAIN_BELOW = 0.9  # a member is profiled again once its best is this fraction of the profiled time


def key(vid: str) -> str:
    return StudyAttr.PROFILE_PREFIX + vid


def recorded(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """Every variant's recorded profile (with the trial, tunables and time it was taken at)."""
    prefix = StudyAttr.PROFILE_PREFIX
    return {k.removeprefix(prefix): v for k, v in study.user_attrs.items() if k.startswith(prefix)}


def needed(best_ms: float, profiled: Mapping[str, Any] | None) -> bool:
    """Profile a member's best when it has none, or once it is clearly faster than the profiled
    configuration (a new design point; small tuning steps do not move the bottleneck)."""
    return profiled is None or best_ms < AGAIN_BELOW * float(profiled.get("ms", float("inf")))


class Profiler:
    """The evaluator's half of ``evolution.profile``: keeps each population member's profile
    current. A backend that cannot profile here (no ncu, no counters) turns it off for the run,
    with one warning; a candidate that cannot be profiled is recorded with why, and not retried."""

    def __init__(self, study: optuna.Study, backend: Profiling, sizes: Mapping[str, int]):
        self.study, self.backend, self.sizes = study, backend, dict(sizes)
        self.profiles = recorded(study)
        self.on = True

    def after(self, trial: int, variant: Variant, tunables: Mapping[str, int], ms: float,
              best_ms: float | None) -> dict[str, Any] | None:
        """A just-measured correct candidate: its profile, if it is its variant's new best
        (``best_ms``: the variant's best before it) and the member needs one."""
        if (best_ms is not None and ms >= best_ms) or not needed(ms, self.profiles.get(variant.id)):
            return None
        return self._take(trial, variant, tunables, ms)

    def backfill(self, members: Iterable[tuple[int, Variant, Mapping[str, int], float]]) -> None:
        """Members measured before profiling was on (a resumed run): (trial, variant, tunables, ms)."""
        for trial, variant, tunables, ms in members:
            if needed(ms, self.profiles.get(variant.id)):
                self._take(trial, variant, tunables, ms)

    def _take(self, trial: int, variant: Variant, tunables: Mapping[str, int],
              ms: float) -> dict[str, Any] | None:
        if not self.on:
            return None
        try:
            found = self.backend.profile(variant, tunables, self.sizes)
        except EvolveError as exc:
            self.on = False
            log.warning("evolution.profile is off for this run: %s", exc)
            return None
        if found is None:
            return None
        entry = {"trial": trial, "tunables": dict(tunables), "ms": round(ms, 6), **found}
        self.study.set_user_attr(key(variant.id), entry)
        self.profiles[variant.id] = entry
        if "error" in found:
            log.info("%s could not be profiled: %s", variant.name, found["error"])
        return found


class Profiling(Protocol):
    def profile(self, variant: Variant, tunables: Mapping[str, int],
                sizes: Mapping[str, int]) -> dict[str, Any] | None: ...
