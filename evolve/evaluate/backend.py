"""Backends measure candidates: ``cupy`` on a real GPU, ``replay`` from recorded measurements.

The search sees only this interface, so a run on recordings exercises the same storage,
resume, dashboard and export paths as a run on the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from evolve.errors import EvolveError
from evolve.evaluate.measurement import Measurement
from evolve.hardware import Hardware
from evolve.kernel.spec import Variant
from evolve.task.task import Task


class Backend(Protocol):
    def start(self, task: Task, target: Hardware | None) -> Hardware:
        """Bind to a task; return the hardware measured on (target None: read the device)."""

    def evaluate(self, variant: Variant, tunables: Mapping[str, int],
                 sizes: list[dict[str, int]]) -> Measurement:
        """Check and time one candidate at the given timing sizes."""

    def prefetch(self, variant: Variant, tunables: Mapping[str, int]) -> None:
        """A hint: this candidate comes soon (compile it ahead, if the backend can)."""

    def prepares(self) -> int:
        """How many upcoming candidates the backend prepares at once (0: it prepares none)."""

    def profile(self, variant: Variant, tunables: Mapping[str, int],
                sizes: Mapping[str, int]) -> dict[str, Any] | None:
        """Where the candidate's time goes at these sizes (``evolve.evaluate.profile``); ``{"error": why}``
        when it could not be profiled, None when the backend has no profile for it. Raises
        EvolveError when nothing can be profiled here."""

    def ceiling_key(self) -> str:
        """Identifies the device for the cached bandwidth ceilings."""

    def measure_ceilings(self) -> dict[str, float]:
        """Measured copy (read + write) and read-only bandwidths in bytes/s, by Hardware field."""

    def close(self) -> None: ...


def create_backend(cfg: Mapping[str, Any]) -> Backend:
    name = cfg.get("name")
    if name == "cupy":
        from evolve.evaluate.cupy_backend import CupyBackend

        return CupyBackend(cfg)
    if name == "replay":
        from evolve.evaluate.replay import ReplayBackend

        return ReplayBackend(cfg)
    if name == "check":
        raise EvolveError("backend=check measures nothing: it checks a task (evolve task=... backend=check)")
    raise EvolveError(f"unknown backend {name!r}: use backend=cupy, backend=replay or backend=check")
