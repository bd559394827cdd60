"""Turning a variant's launch spec into concrete launches for one size and configuration.

Pure arithmetic, no GPU: every limit is checked here, so an absurd grid, block, shared-memory
or scratch request becomes a clear ``launch_error`` before anything reaches the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evolve.cubin import CubinInfo
from evolve.errors import SpecError
from evolve.expr import Expr
from evolve.hardware import Hardware
from evolve.spec import DTYPES, LaunchSpec
from evolve.task import Task

MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_SCRATCH_BYTES = 1 << 32  # 4 GiB, and never more than 4x the task's own buffers
ARG_BYTES = {"buffer": 8, "int32": 4}  # what the harness passes: a device pointer, an int


@dataclass(frozen=True)
class Call:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    args: tuple[tuple[str, str | int], ...]  # ("buffer", name) or ("int32", value)


@dataclass(frozen=True)
class ScratchBuffer:
    name: str
    dtype: str
    count: int
    zero: bool


@dataclass(frozen=True)
class Plan:
    scratch: tuple[ScratchBuffer, ...]
    calls: tuple[Call, ...]


def make_plan(spec: LaunchSpec, task: Task, sizes: Mapping[str, int],
              tunables: Mapping[str, int], hw: Hardware) -> Plan:
    """Resolve every expression; raise SpecError with the first limit that is broken."""
    spec.check(tunables)
    buffers = {a.name for a in task.args}
    if clash := set(tunables) & (set(sizes) | buffers):
        raise SpecError(f"tunables {sorted(clash)} clash with the task's sizes or arguments")
    env = {**sizes, **tunables}

    task_bytes = sum(
        DTYPES[a.dtype] * _prod(task.shape(a, sizes)) for a in task.args
    )
    scratch = []
    for s in spec.scratch:
        if s.name in buffers:
            raise SpecError(f"scratch {s.name!r} has the name of a task argument")
        count = s.size.int_value(env)
        if count < 1:
            raise SpecError(f"scratch {s.name} has {count} elements at {dict(sizes)}")
        scratch.append(ScratchBuffer(s.name, s.dtype, count, s.zero))
    total = sum(DTYPES[s.dtype] * s.count for s in scratch)
    if total > min(MAX_SCRATCH_BYTES, 4 * task_bytes + (1 << 20)):
        raise SpecError(f"scratch of {total} bytes is too large for this task at {dict(sizes)}")

    names = buffers | {s.name for s in scratch}
    calls = []
    for launch in spec.launches:
        grid = _dims(launch.grid, env, MAX_GRID, f"{launch.kernel} grid")
        block = _dims(launch.block, env, MAX_BLOCK, f"{launch.kernel} block")
        threads = block[0] * block[1] * block[2]
        if threads > hw.max_threads_per_block:
            raise SpecError(f"{launch.kernel}: {threads} threads per block > {hw.max_threads_per_block}")
        shared = launch.shared.int_value(env)
        if not 0 <= shared <= hw.max_shared_per_block:
            raise SpecError(
                f"{launch.kernel}: {shared} bytes of dynamic shared memory (limit {hw.max_shared_per_block})"
            )
        args: list[tuple[str, str | int]] = []
        for a in launch.args:
            if a in names:
                args.append(("buffer", a))
                continue
            v = Expr(a).int_value(env)
            if not -(2**31) <= v < 2**31:
                raise SpecError(f"{launch.kernel}: argument {a!r} = {v} does not fit in int32")
            args.append(("int32", v))
        calls.append(Call(launch.kernel, grid, block, shared, tuple(args)))
    return Plan(tuple(scratch), tuple(calls))


def _dims(exprs: tuple[Expr, ...], env: Mapping[str, int], limits: tuple[int, int, int],
          what: str) -> tuple[int, int, int]:
    vals = [e.int_value(env) for e in exprs] + [1] * (3 - len(exprs))
    for axis, v, lim in zip("xyz", vals, limits, strict=True):
        if not 1 <= v <= lim:
            raise SpecError(f"{what}.{axis} = {v} at {dict(env)} (must be 1..{lim})")
    return vals[0], vals[1], vals[2]


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def param_mismatch(plan: Plan, info: CubinInfo) -> str | None:
    """Why a compiled kernel's parameters differ from what the plan passes to it, or None.

    The driver copies each parameter from host memory by the size the kernel declares: a kernel
    declaring more or larger parameters than the harness passes would read the worker's memory.
    Kernels missing from the module are left to the loader, which reports them as not found."""
    for call in plan.calls:
        declared = info.params.get(call.kernel)
        if declared is None:
            continue
        passed = [ARG_BYTES[kind] for kind, _ in call.args]
        offset, expected = 0, []
        for size in passed:
            offset = -(-offset // size) * size
            expected.append((offset, size))
            offset += size
        got = [(p.offset, p.size) for p in declared]
        if got != expected or info.param_bytes.get(call.kernel, offset) != offset:
            sizes = ", ".join(str(p.size) for p in declared) or "none"
            return (f"kernel {call.kernel} takes {len(declared)} parameters ({sizes} bytes) but the spec "
                    f"passes {len(passed)} ({', '.join(map(str, passed)) or 'none'} bytes: "
                    "a pointer per buffer, an int per expression); make its parameter list match 'args'")
    return None
