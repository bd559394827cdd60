"""Turning a variant's launch spec into concrete launches for one size and configuration.

Pure arithmetic, no GPU: every limit is checked here, so an absurd grid, block, shared-memory
or scratch request becomes a clear ``launch_error`` before anything reaches the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evolve.errors import SpecError
from evolve.expr import Expr
from evolve.hardware import Hardware
from evolve.kernel.cubin import CubinInfo
from evolve.kernel.spec import DEVICE_NAMES, DTYPES, LaunchSpec
from evolve.kernel.tensor_maps import TensorMap, TensorMapDecl, resolve
from evolve.task.task import Task

MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
# What the harness passes: a device pointer, an int, a CUtensorMap by value (128 bytes).
ARG_BYTES = {"buffer": 8, "int32": 4, "tensor_map": 128}
ARG_ALIGN = {"buffer": 8, "int32": 4, "tensor_map": 64}  # CUtensorMap is alignas(64)
MAX_CLUSTER = 8  # blocks per cluster without the non-portable attribute


@dataclass(frozen=True)
class Call:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    # ("buffer", name), ("int32", value) or ("tensor_map", name): a map of the plan's tensor_maps,
    # or 128 zero bytes where the spec's map is not made at these sizes (its 'when' is false)
    args: tuple[tuple[str, str | int], ...]
    cluster: tuple[int, int, int] | None = None  # thread-block cluster dims; None: launched without


@dataclass(frozen=True)
class ScratchBuffer:
    name: str
    dtype: str
    count: int
    zero: bool


@dataclass(frozen=True)
class LaunchPlan:
    """How a variant is launched at one size and configuration: scratch, calls, tensor maps."""

    scratch: tuple[ScratchBuffer, ...]
    calls: tuple[Call, ...]
    tensor_maps: tuple[TensorMap, ...] = ()


def make_plan(spec: LaunchSpec, task: Task, sizes: Mapping[str, int],
              tunables: Mapping[str, int], hw: Hardware) -> LaunchPlan:
    """Resolve every expression; raise SpecError with the first limit that is broken."""
    spec.check(tunables)
    buffers = {a.name for a in task.args}
    if clash := set(tunables) & (set(sizes) | buffers):
        raise SpecError(f"tunables {sorted(clash)} clash with the task's sizes or arguments")
    if clash := set(sizes) & set(DEVICE_NAMES):
        raise SpecError(f"size {sorted(clash)[0]!r} has the name of a device property")
    env = {**sizes, **tunables, **device_names(hw)}

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
    if total > (limit := scratch_limit(task, hw, task_bytes)):
        raise SpecError(f"scratch of {total} bytes is too large for this task at {dict(sizes)} (at most "
                        f"{limit}: the task's max_scratch_bytes, and half the GPU's memory less its buffers)")

    declared = {m.name for m in spec.tensor_maps}
    if declared:
        _hopper(hw, "tensor maps")
    if clash := declared & (buffers | set(sizes)):
        raise SpecError(f"tensor map {sorted(clash)[0]!r} has the name of a task argument or size")
    maps = {m.name: _tensor_map(m, task, sizes, env) for m in spec.tensor_maps
            if m.when is None or m.when.holds(env)}  # the others are passed as 128 zero bytes
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
        cluster = None
        if launch.cluster is not None:
            cluster = _cluster(launch.kernel, launch.cluster, grid, env, hw)
        args: list[tuple[str, str | int]] = []
        for a in launch.args:
            if a in names:
                args.append(("buffer", a))
                continue
            if a in declared:
                args.append(("tensor_map", a))
                continue
            v = Expr(a).int_value(env)
            if not -(2**31) <= v < 2**31:
                raise SpecError(f"{launch.kernel}: argument {a!r} = {v} does not fit in int32")
            args.append(("int32", v))
        calls.append(Call(launch.kernel, grid, block, shared, tuple(args), cluster))
    return LaunchPlan(tuple(scratch), tuple(calls), tuple(maps.values()))


def scratch_limit(task: Task, hw: Hardware, task_bytes: int) -> int:
    """As much scratch as a kernel needs (a fused kernel's intermediates may outweigh the task's own
    buffers), up to the task's setting and what the GPU holds beside the harness's copies of the
    task's buffers. Scratch is poisoned before every timed call, so its size buys no cache."""
    if not hw.memory_bytes:
        return task.max_scratch_bytes
    return max(0, min(task.max_scratch_bytes, hw.memory_bytes // 2 - task_bytes))


def device_names(hw: Hardware) -> dict[str, int]:
    """The values of spec.DEVICE_NAMES on this GPU."""
    return {"SMS": hw.sms}


def _hopper(hw: Hardware, what: str) -> None:
    digits = hw.arch.removeprefix("sm_").rstrip("a")
    if not digits.isdigit() or int(digits) < 90:
        raise SpecError(f"{what} need a GPU of sm_90 (Hopper) or newer; this one is {hw.arch}")


def _cluster(kernel: str, exprs: tuple[Expr, ...], grid: tuple[int, int, int], env: Mapping[str, int],
             hw: Hardware) -> tuple[int, int, int]:
    _hopper(hw, "thread-block clusters")
    cluster = _dims(exprs, env, (MAX_CLUSTER,) * 3, f"{kernel} cluster")
    if cluster[0] * cluster[1] * cluster[2] > MAX_CLUSTER:
        raise SpecError(f"{kernel}: a cluster of {cluster} is {cluster[0] * cluster[1] * cluster[2]} blocks "
                        f"(at most {MAX_CLUSTER})")
    for axis, g, c in zip("xyz", grid, cluster, strict=True):
        if g % c:
            raise SpecError(f"{kernel}: grid.{axis} = {g} is not a multiple of cluster.{axis} = {c}")
    return cluster


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


def param_mismatch(plan: LaunchPlan, info: CubinInfo) -> str | None:
    """Why a compiled kernel's parameters differ from what the plan passes to it, or None.

    The driver copies each parameter from host memory by the size the kernel declares: a kernel
    declaring more or larger parameters than the harness passes would read the worker's memory.
    Kernels missing from the module are left to the loader, which reports them as not found."""
    for call in plan.calls:
        declared = info.params.get(call.kernel)
        if declared is None:
            continue
        kinds = [kind for kind, _ in call.args]
        passed = [ARG_BYTES[kind] for kind in kinds]
        got = [(p.offset, p.size) for p in declared]
        # Offsets are relative to where the parameters start in the constant bank (0x210 on
        # sm_90), which is 16-aligned: a 64-aligned CUtensorMap lands 64-aligned in absolute terms.
        bases = _PARAM_BASES if "tensor_map" in kinds else (0,)
        if not any(got == expected and info.param_bytes.get(call.kernel, total) == total
                   for expected, total in (_layout(kinds, base) for base in bases)):
            sizes = ", ".join(str(p.size) for p in declared) or "none"
            maps = (", a const __grid_constant__ CUtensorMap (128 bytes, 64-aligned) per tensor map"
                    if "tensor_map" in kinds else "")
            return (f"kernel {call.kernel} takes {len(declared)} parameters ({sizes} bytes) but the spec "
                    f"passes {len(passed)} ({', '.join(map(str, passed)) or 'none'} bytes: "
                    f"a pointer per buffer, an int per expression{maps}); "
                    "make its parameter list match 'args'")
    return None


_PARAM_BASES = (0, 16, 32, 48)  # the parameter block's start, modulo CUtensorMap's alignment


def _layout(kinds: list[str], base: int) -> tuple[list[tuple[int, int]], int]:
    """(offset, size) of each parameter and the block's size, laid out from ``base`` by each
    kind's alignment, as offsets from ``base``."""
    offset, out = base, []
    for kind in kinds:
        offset = -(-offset // ARG_ALIGN[kind]) * ARG_ALIGN[kind]
        out.append((offset - base, ARG_BYTES[kind]))
        offset += ARG_BYTES[kind]
    return out, offset - base


def _tensor_map(m: TensorMapDecl, task: Task, sizes: Mapping[str, int], env: Mapping[str, int]
                ) -> TensorMap:
    arg = next((a for a in task.args if a.name == m.buffer), None)
    if arg is None:
        raise SpecError(f"tensor map {m.name}: buffer {m.buffer!r} is not a task argument "
                        f"({', '.join(a.name for a in task.args)})")
    return resolve(m, arg.dtype, task.shape(arg, sizes), sizes, env)
