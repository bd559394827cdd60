"""The GPU backend: candidates are measured by a CuPy worker process (see worker.py)."""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from evolve.evaluate.gpu.ahead import CompileAhead
from evolve.evaluate.gpu.worker import STARTUP_TIMEOUT_S, Worker, WorkerDied, WorkerTimeout
from evolve.evaluate.measurement import Measurement, Status
from evolve.hardware import Hardware, check_device, from_device
from evolve.kernel.compiler import CompileError, target_arch
from evolve.kernel.spec import Variant
from evolve.settings import BackendSettings
from evolve.task.task import Task

log = logging.getLogger("evolve")


class CupyBackend:
    def __init__(self, cfg: Mapping[str, Any]):
        s = BackendSettings.from_config(cfg)
        self.timeout_s = float(s.timeout_s)
        self.compile_timeout_s = float(s.compile_timeout_s)
        self.profile_timeout_s = float(s.profile_timeout_s)
        self.timing = asdict(s.timing)  # sent to the worker
        self.worker = Worker(int(s.device))
        n = s.compile_ahead
        n = min(8, max(0, (os.cpu_count() or 1) - 2)) if n == "auto" else int(n)
        self.ahead = CompileAhead(n, self.compile_timeout_s) if n > 0 else None
        self._defines: dict[str, Any] = {}
        self._arch = ""

    def start(self, task: Task, target: Hardware | None) -> Hardware:
        props = self.worker.start()
        hw = from_device(props) if target is None else check_device(target, props)
        self._key = f"{props['name']}|driver {props['driver']}"
        self.worker.init = {
            "task": dict(task.config), "correctness_sizes": list(task.correctness_sizes),
            "hardware": hw.to_dict(), "settings": self.timing, "secret": secrets.randbits(62),
        }
        log.info("warming up the GPU worker: the harness's own kernels for %s's dtypes (compiled once per "
                 "machine, then cached), before the search's clock starts", task.name)
        self.worker.call("init", self.worker.init, STARTUP_TIMEOUT_S)
        self._defines, self._arch = dict(task.defines), hw.arch
        return hw

    def prefetch(self, variant: Variant, tunables: Mapping[str, int]) -> None:
        if self.ahead is not None and self._arch and (job := self._job(variant, tunables)):
            self.ahead.submit(*job)

    def prepares(self) -> int:
        return self.ahead.processes if self.ahead is not None else 0

    def _job(self, variant: Variant, tunables: Mapping[str, int]) -> tuple[str, dict[str, Any], str] | None:
        """What the worker compiles for this candidate (the compile cache's key); None where it
        cannot be compiled here (the worker says why)."""
        try:
            arch = target_arch(self._arch, variant.spec.arch_specific)
        except CompileError:
            return None
        return variant.source, {**tunables, **self._defines}, arch

    def evaluate(self, variant: Variant, tunables: Mapping[str, int],
                 sizes: list[dict[str, int]]) -> Measurement:
        waited = 0.0  # on a helper compiling this candidate: compile time too
        if self.ahead is not None and (job := self._job(variant, tunables)):
            start = time.perf_counter()
            self.ahead.wait(*job)
            waited = time.perf_counter() - start
        payload = {"source": variant.source, "tunables": dict(tunables), "sizes": sizes}
        try:
            m = Measurement.from_dict(
                self.worker.call("evaluate", payload, self.timeout_s, first_stage=self.compile_timeout_s)
            )
            return replace(m, compile_s=m.compile_s + waited, time_s=m.time_s + waited)
        except WorkerTimeout as exc:
            if exc.stage == "compile":
                return Measurement.failed(
                    Status.COMPILE_ERROR,
                    f"compilation took longer than the {self.compile_timeout_s:.0f} s time limit; stopped",
                )
            return Measurement.failed(
                Status.TIMEOUT, f"no result within {self.timeout_s:.0f} s; the worker was restarted"
            )
        except WorkerDied as exc:
            return Measurement.failed(Status.CRASHED, f"{exc}; the worker was restarted")

    def profile(self, variant: Variant, tunables: Mapping[str, int],
                sizes: Mapping[str, int]) -> dict[str, Any] | None:
        payload = {"source": variant.source, "tunables": dict(tunables), "sizes": dict(sizes),
                   "timeout_s": self.profile_timeout_s}
        try:
            return dict(self.worker.call("profile", payload, self.profile_timeout_s + 30))
        except (WorkerTimeout, WorkerDied) as exc:
            return {"error": f"the worker did not finish profiling ({exc}); it was restarted"}

    def ceiling_key(self) -> str:
        return self._key

    def measure_ceilings(self) -> dict[str, float]:
        return dict(self.worker.call("ceilings", None, STARTUP_TIMEOUT_S))

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead.close()
        self.worker.close()
