"""Measuring one candidate on the GPU; runs only inside the worker process.

The harness owns everything but the device code: it allocates and poisons buffers, launches
what the plan says, synchronizes, checks and times. Steps (see DESIGN.md, "Evaluating a
candidate"): compile with NVRTC; check correctness over several rounds and sizes with fresh
secret-seeded inputs, NaN-filled outputs, untouched inputs and a repeated launch; time with a
warm-up, an L2 flush before every sample, rotating buffer sets, CUDA events and a median, and
verify the output of one timed call chosen at random.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from cupy_backends.cuda.api import driver, runtime

from evolve.compiler import CompileError, SourceRejected, compile_cuda, first_error
from evolve.correctness import compare_all
from evolve.errors import EvolveError, SpecError
from evolve.hardware import Hardware
from evolve.measurement import Measurement, Status, TimingStats
from evolve.plan import Plan, make_plan
from evolve.spec import Variant
from evolve.task import Task, size_label

CUDA_ERRORS = (driver.CUDADriverError, runtime.CUDARuntimeError)
GUARD = 4096  # elements of guard zone on each side of every buffer during correctness checks
# Guards hold NaN bit patterns: an out-of-bounds read poisons the result, a write changes them.
_GUARD_BITS = {2: 0x7EA5, 4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}

# The harness's own read-only stream (not a candidate): 16-byte loads, four in flight per thread.
_READ_STREAM = r"""
extern "C" __global__ void __launch_bounds__(256)
read_stream(const float4* __restrict__ x, long long n4, float* __restrict__ sink) {
    long long stride = (long long)gridDim.x * 256, i = (long long)blockIdx.x * 256 + threadIdx.x;
    float acc = 0.f;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 a = x[i], b = x[i + stride], c = x[i + 2 * stride], d = x[i + 3 * stride];
        acc += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w))
             + ((c.x + c.y) + (c.z + c.w)) + ((d.x + d.y) + (d.z + d.w));
    }
    for (; i < n4; i += stride) {
        float4 a = x[i];
        acc += (a.x + a.y) + (a.z + a.w);
    }
    if (acc == -1.0f) sink[0] = acc;  // never true for the data used; keeps the loads alive
}
"""


@dataclass(frozen=True)
class TimingSettings:
    warmup_ms: float = 25.0
    warmup_min: int = 10
    min_samples: int = 10
    max_samples: int = 100
    max_time_s: float = 2.0
    target_rel_iqr: float = 0.01
    rounds: int = 2  # correctness rounds per size, each with fresh inputs

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> TimingSettings:
        return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})


class Crashed(Exception):
    """The CUDA context is poisoned (illegal address, trap, ...): the worker must restart."""


class _Fail(Exception):
    def __init__(self, status: Status, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class _Guarded:
    """A device buffer with guard zones before and after it, to catch out-of-bounds accesses."""

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        n = int(np.prod(shape))
        itemsize = np.dtype(dtype).itemsize
        self.n, self.bits = n, cp.dtype(f"uint{8 * itemsize}")
        self.pattern = _GUARD_BITS.get(itemsize, 0xA5)
        self.base = cp.empty(n + 2 * GUARD, dtype=dtype)
        self.base.view(self.bits).fill(self.pattern)
        self.array = self.base[GUARD:GUARD + n].reshape(shape)

    def intact(self) -> bool:
        u = self.base.view(self.bits)
        return bool((u[:GUARD] == self.pattern).all()) and bool((u[GUARD + self.n:] == self.pattern).all())


def device_properties(device: int) -> dict[str, Any]:
    attr = runtime.deviceGetAttribute
    props = runtime.getDeviceProperties(device)
    name = props["name"]
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "major": props["major"],
        "minor": props["minor"],
        "sms": attr(runtime.cudaDevAttrMultiProcessorCount, device),
        "max_threads_per_block": attr(runtime.cudaDevAttrMaxThreadsPerBlock, device),
        "max_threads_per_sm": attr(runtime.cudaDevAttrMaxThreadsPerMultiProcessor, device),
        "max_shared_per_block": attr(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "shared_per_sm": attr(runtime.cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
        "registers_per_sm": attr(runtime.cudaDevAttrMaxRegistersPerMultiprocessor, device),
        "l2_bytes": attr(runtime.cudaDevAttrL2CacheSize, device),
        "driver": runtime.driverGetVersion(),
        "pci_bus": attr(runtime.cudaDevAttrPciBusId, device),
    }


class GpuEvaluator:
    def __init__(self, task: Task, hw: Hardware, settings: TimingSettings, secret: int):
        self.task, self.hw, self.s = task, hw, settings
        self.secret = secret
        self.counter = 0
        self._flush = cp.empty(max(2 * hw.l2_bytes, 1 << 26), dtype=cp.uint8)
        self._rng = random.Random(secret)

    # ---- public -----------------------------------------------------------------------
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
            try:
                variant = Variant.parse(source)
                variant.spec.check(tunables)
            except SpecError as exc:
                raise _Fail(Status.REJECTED, str(exc)) from None
            plans = self._plans(variant, tunables, [*self.task.correctness_sizes, *timing_sizes])
            try:
                compiled = compile_cuda(source, {**tunables, **dict(self.task.defines)}, self.hw.arch)
            except CompileError as exc:
                status = Status.REJECTED if isinstance(exc, SourceRejected) else Status.COMPILE_ERROR
                raise _Fail(status, first_error(str(exc))) from exc
            if on_compiled is not None:
                on_compiled()
            log = compiled.log
            compiled_s = time.perf_counter() - t0
            fns = self._load(compiled.cubin, variant, plans)
            resources = self._resources(fns, plans[size_label(timing_sizes[0])])
            t1 = time.perf_counter()
            self._check(fns, plans)
            check_s = time.perf_counter() - t1
            timings = {
                size_label(s): self._time(fns, plans[size_label(s)], s) for s in timing_sizes
            }
        except _Fail as f:
            if f.status is Status.COMPILE_ERROR and f.__cause__ is not None:
                log = str(f.__cause__)
            return Measurement.failed(
                f.status, f.reason, resources=resources, log=log, compile_s=compiled_s,
                check_s=check_s, time_s=time.perf_counter() - t0,
            )
        return Measurement(
            status=Status.OK, timings=timings, resources=resources, compile_s=compiled_s,
            check_s=check_s, time_s=time.perf_counter() - t0, log=log,
        )

    def launcher(self, source: str, tunables: Mapping[str, int], sizes: dict[str, int],
                 buffers: Mapping[str, Any]) -> Callable[[], None]:
        """One call of a kernel on the caller's buffers, for a benchmark that times it side by
        side with other implementations (trusted kernels only: this runs in the caller)."""
        try:
            variant = Variant.parse(source)
            variant.spec.check(tunables)
            plan = self._plans(variant, tunables, [sizes])[size_label(sizes)]
            compiled = compile_cuda(source, {**tunables, **dict(self.task.defines)}, self.hw.arch)
            fns = self._load(compiled.cubin, variant, {"": plan})
        except (SpecError, CompileError) as exc:
            raise EvolveError(str(exc).splitlines()[0]) from None
        except _Fail as f:
            raise EvolveError(f.reason) from None
        bufs = {**buffers, **self._scratch(plan)}
        return lambda: self._run(fns, plan, bufs)

    def ceilings(self, nbytes: int = 1 << 32, samples: int = 20) -> dict[str, float]:
        """Bandwidths in bytes/s: a device-to-device copy (bytes read + written) and a
        read-only stream, each the median of ``samples`` after a warm-up."""
        src = cp.empty(nbytes, dtype=cp.uint8)
        dst = cp.empty_like(src)
        src.fill(7)
        sink = cp.zeros(1, dtype=cp.float32)
        module = cp.cuda.function.Module()
        module.load(compile_cuda(_READ_STREAM, {}, self.hw.arch).cubin)
        read = module.get_function("read_stream")
        n4 = np.int64(nbytes // 16)
        grid = (self.hw.sms * (self.hw.max_threads_per_sm // 256), 1, 1)

        def copy() -> None:
            runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, 0)

        def stream() -> None:
            read(grid, (256, 1, 1), (src, n4, sink))

        out = {}
        for key, op, moved in (("copy_bandwidth_bps", copy, 2 * nbytes),
                               ("read_bandwidth_bps", stream, nbytes)):
            for _ in range(3):
                op()
            times = []
            for _ in range(samples):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                op()
                end.record()
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
            out[key] = moved / TimingStats.of(times).median_s
        return out

    # ---- steps ------------------------------------------------------------------------
    def _plans(self, variant: Variant, tunables: Mapping[str, int],
               sizes: list[dict[str, int]]) -> dict[str, Plan]:
        plans = {}
        for s in sizes:
            try:
                plans[size_label(s)] = make_plan(variant.spec, self.task, s, tunables, self.hw)
            except SpecError as exc:
                raise _Fail(Status.LAUNCH_ERROR, f"at {size_label(s)}: {exc}") from None
        return plans

    def _load(self, cubin: bytes, variant: Variant, plans: dict[str, Plan]) -> dict[str, Any]:
        module = cp.cuda.function.Module()
        try:
            module.load(cubin)
        except CUDA_ERRORS as exc:
            raise _Fail(Status.COMPILE_ERROR, f"cannot load module: {exc}") from None
        fns = {}
        for launch in variant.spec.launches:
            if launch.kernel in fns:
                continue
            try:
                fns[launch.kernel] = module.get_function(launch.kernel)
            except CUDA_ERRORS:
                raise _Fail(
                    Status.COMPILE_ERROR,
                    f"kernel {launch.kernel!r} not found: declare it extern \"C\" __global__",
                ) from None
        need = {}
        for plan in plans.values():
            for call in plan.calls:
                need[call.kernel] = max(need.get(call.kernel, 0), call.shared)
        for name, shared in need.items():
            if shared > 48 * 1024:
                driver.funcSetAttribute(
                    fns[name].ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared
                )
        fns["__module__"] = module  # keep the module alive as long as its functions
        return fns

    def _resources(self, fns: dict[str, Any], plan: Plan) -> dict[str, dict[str, float]]:
        out = {}
        for call in plan.calls:
            ptr = fns[call.kernel].ptr
            get = driver.funcGetAttribute
            threads = call.block[0] * call.block[1] * call.block[2]
            try:
                blocks = driver.occupancyMaxActiveBlocksPerMultiprocessor(ptr, threads, call.shared)
            except CUDA_ERRORS:
                blocks = 0
            out[call.kernel] = {
                "registers": get(driver.CU_FUNC_ATTRIBUTE_NUM_REGS, ptr),
                "local_bytes": get(driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, ptr),
                "static_shared_bytes": get(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, ptr),
                "dynamic_shared_bytes": call.shared,
                "threads_per_block": threads,
                "occupancy": blocks * threads / self.hw.max_threads_per_sm,
            }
        return out

    def _check(self, fns: dict[str, Any], plans: dict[str, Plan]) -> None:
        for si, sizes in enumerate(self.task.correctness_sizes):
            label = size_label(sizes)
            plan = plans[label]
            for rnd in range(self.s.rounds):
                fresh = self.task.make_inputs(cp, sizes, self._seed(si, rnd))
                refs = self.task.expected(cp, fresh, sizes)
                guarded = {k: _Guarded(v.shape, v.dtype) for k, v in fresh.items()}
                for k, g in guarded.items():
                    g.array[...] = fresh[k]
                inputs = {k: g.array for k, g in guarded.items()}
                for repeat in range(2 if rnd == 0 else 1):
                    out_guards = {
                        a.name: _Guarded(self.task.shape(a, sizes), a.dtype) for a in self.task.outputs
                    }
                    for g in out_guards.values():
                        g.array.fill(np.nan)
                    outputs = {k: g.array for k, g in out_guards.items()}
                    scratch = self._scratch(plan, guarded=True)
                    self._run(fns, plan, {**inputs, **outputs, **{k: g.array for k, g in scratch.items()}})
                    self._sync()
                    where = f"at {label}, round {rnd + 1}" + (", repeated launch" if repeat else "")
                    for k, g in {**guarded, **out_guards, **scratch}.items():
                        if not g.intact():
                            raise _Fail(Status.WRONG, f"wrote out of bounds of {k} {where}")
                    for k, v in inputs.items():
                        if not bool(cp.array_equal(v, fresh[k])):
                            raise _Fail(Status.WRONG, f"input {k} was modified {where}")
                    reason = compare_all(cp, self.task, outputs, refs)
                    if reason:
                        raise _Fail(Status.WRONG, f"{reason} {where}")

    def _time(self, fns: dict[str, Any], plan: Plan, sizes: dict[str, int]) -> TimingStats:
        """Time the candidate at one size. Every call looks the same to the kernel: just before
        it, outside the timed window, its inputs change at a few secret places, its outputs and
        scratch are refilled with garbage and the L2 is flushed. In every batch one call chosen at
        random is checked against a float64 reference of exactly the inputs it saw; the inputs are
        checksummed around every call and the guard zones checked after every batch."""
        s, label = self.s, size_label(sizes)
        sets = self._timing_sets(sizes)
        scratch = self._scratch(plan, guarded=True)
        views = [{k: g.array for k, g in (st | scratch).items()} for st in sets]
        inputs = [a.name for a in self.task.inputs]
        outputs = [a.name for a in self.task.outputs]

        def prepare(k: int) -> None:
            for name in inputs:
                self._perturb(views[k][name])
            for name in outputs:
                views[k][name].fill(np.nan)
            for sc in plan.scratch:
                if not sc.zero:
                    views[k][sc.name].view(cp.uint8).fill(0xFF)
            self._flush.data.memset_async(0xA5, self._flush.nbytes)

        def launch(k: int) -> None:
            self._run(fns, plan, views[k])

        def watched(k: int) -> Any:
            """Launch with the inputs checksummed before and after."""
            before = [self._checksum(views[k][n]) for n in inputs]
            launch(k)
            return cp.stack(before + [self._checksum(views[k][n]) for n in inputs])

        def check_inputs(sums: list[Any]) -> None:
            half = len(inputs)
            if any(bool((c[:half] != c[half:]).any()) for c in sums):
                raise _Fail(Status.WRONG, f"an input was modified during a timed call at {label}")

        # warm-up: at least warmup_ms and warmup_min launches, prepared and watched like timed ones
        start, end = cp.cuda.Event(), cp.cuda.Event()
        prepare(0)
        before = [self._checksum(views[0][n]) for n in inputs]
        start.record()
        launch(0)
        end.record()
        sums = [cp.stack(before + [self._checksum(views[0][n]) for n in inputs])]
        self._sync(end)
        est_ms = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
        for i in range(min(max(s.warmup_min, math.ceil(s.warmup_ms / est_ms)), 10_000)):
            prepare(i % len(sets))
            sums.append(watched(i % len(sets)))
        self._sync()
        check_inputs(sums)

        samples: list[float] = []
        batch = max(s.min_samples, len(sets))
        t_begin = time.perf_counter()
        while True:
            checked = self._rng.randrange(batch)
            events, sums = [], []
            for i in range(batch):
                k = (len(samples) + i) % len(sets)
                prepare(k)
                before = [self._checksum(views[k][n]) for n in inputs]
                if i == checked:
                    seen = {n: views[k][n].copy() for n in inputs}
                ev = cp.cuda.Event(), cp.cuda.Event()
                ev[0].record()
                launch(k)
                ev[1].record()
                events.append(ev)
                sums.append(cp.stack(before + [self._checksum(views[k][n]) for n in inputs]))
                if i == checked:
                    made = {n: views[k][n].copy() for n in outputs}
            self._sync()
            check_inputs(sums)
            for st in (*sets, scratch):
                for name, g in st.items():
                    if not g.intact():
                        raise _Fail(Status.WRONG, f"wrote out of bounds of {name} in a timed call at {label}")
            reason = compare_all(cp, self.task, made, self.task.expected(cp, seen, sizes))
            if reason:
                raise _Fail(Status.WRONG, f"{reason} in a timed call at {label}")
            del seen, made
            samples += [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in events]
            stats = TimingStats.of(samples)
            if (
                (len(samples) >= s.min_samples and stats.rel_iqr <= s.target_rel_iqr)
                or len(samples) >= s.max_samples
                or time.perf_counter() - t_begin > s.max_time_s
            ):
                return stats

    # ---- helpers ----------------------------------------------------------------------
    def _seed(self, *parts: int) -> int:
        h = hashlib.sha256(repr((self.secret, self.counter, *parts)).encode()).digest()
        return int.from_bytes(h[:8], "little") >> 1

    def _scratch(self, plan: Plan, guarded: bool = False) -> dict[str, Any]:
        """Scratch buffers holding garbage (NaN for floats) unless the spec zeroes them per call."""
        out: dict[str, Any] = {}
        for s in plan.scratch:
            if guarded:
                g = _Guarded((s.count,), s.dtype)
                g.array.view(cp.uint8).fill(0xFF)
                out[s.name] = g
            else:
                buf = cp.empty(s.count, dtype=s.dtype)
                buf.view(cp.uint8).fill(0xFF)
                out[s.name] = buf
        return out

    def _timing_sets(self, sizes: dict[str, int]) -> list[dict[str, _Guarded]]:
        """Fresh guarded inputs and outputs at a timing size for this candidate: enough sets
        (rotated between calls) that together they are at least twice the L2."""
        set_bytes = sum(
            int(np.prod(self.task.shape(a, sizes))) * np.dtype(a.dtype).itemsize for a in self.task.args
        )
        sets = []
        for i in range(min(8, max(1, math.ceil(2 * self.hw.l2_bytes / set_bytes)))):
            st = {}
            for name, value in self.task.make_inputs(cp, sizes, self._seed(-1, i)).items():
                st[name] = _Guarded(value.shape, value.dtype)
                st[name].array[...] = value
            for a in self.task.outputs:
                st[a.name] = _Guarded(self.task.shape(a, sizes), a.dtype)
            sets.append(st)
        return sets

    def _perturb(self, x: Any, count: int = 8) -> None:
        """Change a few elements at secret places: results cached from an earlier call go stale."""
        flat = x.reshape(-1)
        src = cp.asarray([self._rng.randrange(flat.size) for _ in range(count)])
        dst = cp.asarray([self._rng.randrange(flat.size) for _ in range(count)])
        flat[dst] = flat[src]

    @staticmethod
    def _checksum(x: Any) -> Any:
        bits = cp.dtype(f"uint{8 * x.dtype.itemsize}")
        return x.reshape(-1).view(bits).sum(dtype=cp.uint64)

    def _run(self, fns: dict[str, Any], plan: Plan, buffers: dict[str, Any]) -> None:
        for s in plan.scratch:
            if s.zero:
                buf = buffers[s.name]
                buf.data.memset_async(0, buf.nbytes)
        for call in plan.calls:
            args = tuple(buffers[v] if kind == "buffer" else np.int32(v) for kind, v in call.args)
            try:
                fns[call.kernel](call.grid, call.block, args, shared_mem=call.shared)
            except CUDA_ERRORS as exc:
                self._raise_cuda(exc, f"launching {call.kernel} grid={call.grid} block={call.block}")

    def _sync(self, event: Any = None) -> None:
        try:
            if event is None:
                runtime.deviceSynchronize()
            else:
                event.synchronize()
        except CUDA_ERRORS as exc:
            self._raise_cuda(exc, "while running")

    def _raise_cuda(self, exc: Exception, where: str) -> None:
        """A launch refused by the driver is the candidate's fault; a poisoned context is fatal."""
        try:
            runtime.deviceSynchronize()
        except CUDA_ERRORS:
            raise Crashed(f"{exc} {where}") from None
        raise _Fail(Status.LAUNCH_ERROR, f"{exc} {where}") from None
