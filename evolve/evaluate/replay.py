"""The replay backend: answers from recorded GPU measurements, with no GPU.

It makes the whole pipeline (search, storage, resume, dashboard, export) runnable and testable
on any machine, and it says plainly when a candidate was never measured.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from evolve.errors import EvolveError, SpecError
from evolve.evaluate.measurement import Measurement, Status
from evolve.evaluate.plan import make_plan
from evolve.evaluate.recording import Recording, builtin_path
from evolve.hardware import Hardware
from evolve.kernel.spec import Variant, candidate_key
from evolve.paths import RECORDINGS_DIR
from evolve.settings import BackendSettings
from evolve.task.task import Task, size_label


class ReplayBackend:
    def __init__(self, cfg: Mapping[str, Any]):
        s = BackendSettings.from_config(cfg)
        self.extra = [Path(p) for p in s.recordings]
        self.delay_s = float(s.delay_s)

    def start(self, task: Task, target: Hardware | None) -> Hardware:
        available = sorted(str(p.relative_to(RECORDINGS_DIR)) for p in RECORDINGS_DIR.glob("*/*.jsonl"))
        if target is None:
            raise EvolveError(
                "backend=replay needs a named hardware target such as hardware=h200 "
                f"(recordings: {', '.join(available) or 'none'})"
            )
        self.rec = Recording.load([builtin_path(target.name, task.name), *self.extra],
                                  target.name, task.name)
        if not self.rec.measurements:
            raise EvolveError(
                f"no recorded measurements for task {task.name} on {target.name} "
                f"(recordings: {', '.join(available) or 'none'})"
            )
        self.hardware, self.task = target, task
        return replace(target, device=self.rec.device or target.device, **self.rec.ceilings)

    def evaluate(self, variant: Variant, tunables: Mapping[str, int],
                 sizes: list[dict[str, int]]) -> Measurement:
        time.sleep(self.delay_s)
        m = self.rec.measurements.get(candidate_key(variant.id, tunables))
        where = f"{self.hardware.name}/{self.task.name}"
        if m is None:
            return self._refused(variant, tunables, sizes) or Measurement.failed(
                Status.NOT_RECORDED,
                f"variant {variant.name} ({variant.id}) with {dict(tunables)} "
                f"is not in the {where} recording",
            )
        missing = [size_label(s) for s in sizes if size_label(s) not in m.timings]
        if m.ok and missing:
            return Measurement.failed(
                Status.NOT_RECORDED, f"the {where} recording has no timing at {', '.join(missing)}"
            )
        return m

    def profile(self, variant: Variant, tunables: Mapping[str, int],
                sizes: Mapping[str, int]) -> dict[str, Any] | None:
        """The profile recorded with the candidate's measurement, if one was taken."""
        m = self.rec.measurements.get(candidate_key(variant.id, tunables))
        return None if m is None else m.profile

    def _refused(self, variant: Variant, tunables: Mapping[str, int],
                 sizes: list[dict[str, int]]) -> Measurement | None:
        """What the GPU backend decides before anything runs (a configuration the spec refuses, a
        launch its plan refuses) needs no recording: the same verdict and reason here."""
        try:
            variant.spec.check(tunables)
        except SpecError as exc:
            return Measurement.failed(Status.REJECTED, str(exc))
        for s in [*self.task.correctness_sizes, *sizes]:
            try:
                make_plan(variant.spec, self.task, s, tunables, self.hardware)
            except SpecError as exc:
                return Measurement.failed(Status.LAUNCH_ERROR, f"at {size_label(s)}: {exc}")
        return None

    def prefetch(self, variant: Variant, tunables: Mapping[str, int]) -> None:
        pass  # nothing to compile

    def prepares(self) -> int:
        return 0

    def ceiling_key(self) -> str:
        return f"replay|{self.hardware.name}"

    def measure_ceilings(self) -> dict[str, float]:
        raise EvolveError(
            f"the {self.hardware.name} recording has no measured bandwidths; set "
            "hardware.copy_bandwidth_bps and hardware.read_bandwidth_bps"
        )

    def close(self) -> None:
        pass
