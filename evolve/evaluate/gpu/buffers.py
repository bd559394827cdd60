"""Device buffers as the harness lays them out: guard zones around each, poisoned before use.

Every input, output and scratch buffer a candidate sees sits between two guard zones holding NaN
bit patterns: an out-of-bounds write changes them, an out-of-bounds read poisons the result.
Outputs are pre-filled with a value the kernel must overwrite; scratch that the spec does not
zero holds garbage (0xFF bytes, NaN for floats).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cupy as cp
import numpy as np

from evolve import dtypes
from evolve.evaluate.plan import LaunchPlan
from evolve.task.correctness import unwritten_fill
from evolve.task.task import Task

GUARD = 4096  # elements of guard zone on each side of every buffer
_GUARD_BITS = {1: 0xA5, 2: 0x7EA5, 4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}


class Guarded:
    """A device buffer with guard zones before and after it, to catch out-of-bounds accesses."""

    def __init__(self, shape: tuple[int, ...], dtype: str):
        n = int(np.prod(shape))
        store = dtypes.storage(dtype)  # bfloat16 and fp8 as raw bits, bool as bytes
        self.n, self.bits = n, cp.dtype(f"uint{8 * store.itemsize}")
        self.pattern = _GUARD_BITS[store.itemsize]
        self.base = cp.empty(n + 2 * GUARD, dtype=store)
        self.base.view(self.bits).fill(self.pattern)
        self.array = self.base[GUARD:GUARD + n].reshape(shape)

    def intact(self) -> bool:
        u = self.base.view(self.bits)
        return bool((u[:GUARD] == self.pattern).all()) and bool((u[GUARD + self.n:] == self.pattern).all())


def guarded_io(task: Task, sizes: Mapping[str, int]) -> dict[str, Guarded]:
    """A guarded buffer for every argument of the task at these sizes (contents undefined)."""
    return {a.name: Guarded(task.shape(a, sizes), a.dtype) for a in task.args}


def guarded_scratch(plan: LaunchPlan) -> dict[str, Guarded]:
    return {s.name: Guarded((s.count,), s.dtype) for s in plan.scratch}


def plain_scratch(plan: LaunchPlan) -> dict[str, Any]:
    """Scratch without guards, for trusted kernels timed beside other implementations."""
    out = {}
    for s in plan.scratch:
        out[s.name] = cp.empty(s.count, dtype=dtypes.storage(s.dtype))
        out[s.name].view(cp.uint8).fill(0xFF)
    return out


def poison(task: Task, plan: LaunchPlan, buffers: Mapping[str, Any],
           rng: np.random.Generator) -> dict[str, float | int]:
    """Before a launch: outputs hold a value the kernel must overwrite (inouts hold their input),
    scratch that the spec does not zero holds garbage. Returns each output's fill, for the
    comparison."""
    fills = {}
    for a in task.fresh_outputs:
        fills[a.name] = unwritten_fill(a.dtype, rng)
        buffers[a.name].fill(fills[a.name])
    for s in plan.scratch:
        if not s.zero:
            buffers[s.name].view(cp.uint8).fill(0xFF)
    return fills


def first_overrun(buffers: Mapping[str, Guarded]) -> str | None:
    """The first buffer whose guard zones were written, or None."""
    return next((name for name, g in buffers.items() if not g.intact()), None)


def views(buffers: Mapping[str, Guarded]) -> dict[str, Any]:
    return {name: g.array for name, g in buffers.items()}
