"""Judging one candidate on the GPU; runs only inside the worker process.

The harness owns everything but the device code: it allocates and poisons buffers, launches what
the plan says, synchronizes, checks and times. The steps, in the order of docs/judging.md ("How a
candidate is judged"): parse the spec and plan every size (``evolve.evaluate.plan``); compile with NVRTC and
check what the code compiled to (``evolve.kernel.compiler``); load it after checking its kernels'
parameters against the spec (``loading``); correctness (``checking``); timing (``timing``).
Whatever a candidate does ends as its measurement: a step's failure with its status and reason,
a poisoned context as ``Crashed`` (the worker restarts).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from evolve.errors import EvolveError, SpecError
from evolve.evaluate.gpu import buffers
from evolve.evaluate.gpu.checking import check
from evolve.evaluate.gpu.device import measure_ceilings
from evolve.evaluate.gpu.failure import Fail
from evolve.evaluate.gpu.loading import Loaded
from evolve.evaluate.gpu.timing import L2Flush, time_at
from evolve.evaluate.measurement import Measurement, Status
from evolve.evaluate.plan import LaunchPlan, make_plan
from evolve.hardware import Hardware
from evolve.kernel.compiler import CompileError, SourceRejected, compile_cuda, first_error, target_arch
from evolve.kernel.spec import Variant
from evolve.settings import TimingSettings
from evolve.task.task import Task, size_label


class GpuEvaluator:
    def __init__(self, task: Task, hw: Hardware, settings: TimingSettings, secret: int):
        self.task, self.hw, self.timing = task, hw, settings
        self.secret = secret
        self.counter = 0
        self.flush = L2Flush(hw.l2_bytes)

    def evaluate(self, source: str, tunables: Mapping[str, int], timing_sizes: list[dict[str, int]],
                 on_compiled: Callable[[], None] | None = None) -> Measurement:
        """Measure one candidate; ``on_compiled`` tells the parent that compiling is over (it
        has its own time limit)."""
        self.counter += 1
        t0 = time.perf_counter()
        compiled_s = check_s = 0.0
        resources: dict[str, dict[str, float]] = {}
        log = ""
        try:
            variant, plans = self._plan(source, tunables, [*self.task.correctness_sizes, *timing_sizes])
            cubin, log = self._compile(variant, tunables)
            if on_compiled is not None:
                on_compiled()
            compiled_s = time.perf_counter() - t0
            loaded = Loaded(cubin, plans, self.hw)
            resources = loaded.resources(plans[size_label(timing_sizes[0])], self.hw)
            t1 = time.perf_counter()
            check(loaded, self.task, plans, self.timing.rounds, self._seed)
            check_s = time.perf_counter() - t1
            timings = {
                size_label(s): time_at(loaded, self.task, plans[size_label(s)], s, self.timing, self.flush,
                                       self._seed)
                for s in timing_sizes
            }
        except Fail as f:
            return Measurement.failed(
                f.status, f.reason, resources=resources, log=f.log or log, compile_s=compiled_s,
                check_s=check_s, time_s=time.perf_counter() - t0,
            )
        return Measurement(
            status=Status.OK, timings=timings, resources=resources, compile_s=compiled_s,
            check_s=check_s, time_s=time.perf_counter() - t0, log=log,
        )

    def launcher(self, source: str, tunables: Mapping[str, int], sizes: dict[str, int],
                 bufs: Mapping[str, Any]) -> Callable[[], None]:
        """One call of a kernel on the caller's buffers, for a benchmark that times it side by
        side with other implementations (trusted kernels only: this runs in the caller)."""
        try:
            variant, plans = self._plan(source, tunables, [sizes])
            plan = plans[size_label(sizes)]
            loaded = Loaded(self._compile(variant, tunables)[0], plans, self.hw)
        except Fail as f:
            raise EvolveError(f.reason.splitlines()[0]) from None
        args = {**bufs, **buffers.plain_scratch(plan)}
        return lambda: loaded.run(plan, args)

    def ceilings(self) -> dict[str, float]:
        return measure_ceilings(self.hw.arch, self.hw.sms, self.hw.max_threads_per_sm)

    # ---- steps ------------------------------------------------------------------------
    def _plan(self, source: str, tunables: Mapping[str, int],
              sizes: list[dict[str, int]]) -> tuple[Variant, dict[str, LaunchPlan]]:
        try:
            variant = Variant.parse(source)
            variant.spec.check(tunables)
        except SpecError as exc:
            raise Fail(Status.REJECTED, str(exc)) from None
        plans = {}
        for s in sizes:
            try:
                plans[size_label(s)] = make_plan(variant.spec, self.task, s, tunables, self.hw)
            except SpecError as exc:
                raise Fail(Status.LAUNCH_ERROR, f"at {size_label(s)}: {exc}") from None
        return variant, plans

    def _compile(self, variant: Variant, tunables: Mapping[str, int]) -> tuple[bytes, str]:
        try:
            arch = target_arch(self.hw.arch, variant.spec.arch_specific)
            compiled = compile_cuda(variant.source, {**tunables, **dict(self.task.defines)}, arch)
        except SourceRejected as exc:
            raise Fail(Status.REJECTED, first_error(str(exc))) from None
        except CompileError as exc:
            raise Fail(Status.COMPILE_ERROR, first_error(str(exc)), log=str(exc)) from None
        return compiled.cubin, compiled.log

    def _seed(self, *parts: Any) -> int:
        """A secret seed for one purpose of this candidate's evaluation."""
        h = hashlib.sha256(repr((self.secret, self.counter, *parts)).encode()).digest()
        return int.from_bytes(h[:8], "little") >> 1
