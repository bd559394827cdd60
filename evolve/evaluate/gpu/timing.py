"""Step 4 of judging a candidate: timing at a timing size, every timed call checked.

Every call is prepared the same way, down to the host work around it: fresh secret-seeded inputs
are written into its buffers, its outputs and scratch are poisoned, and the L2 is flushed last, so
nothing touches the candidate's memory between the flush and the launch. CUDA events bracket the
launch alone. Every timed call is then checked like a correctness launch (guards, inputs made
again and compared bit for bit, outputs against the float64 reference of those inputs): no call
is special, so a kernel cannot be honest only when watched, and since each call's inputs are new
everywhere, a cache of earlier inputs or results is worthless. Warm-up calls are prepared the
same way and not timed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import cupy as cp
import numpy as np

from evolve.evaluate.gpu import buffers
from evolve.evaluate.gpu.checking import verify
from evolve.evaluate.gpu.device import synchronize
from evolve.evaluate.gpu.loading import Loaded
from evolve.evaluate.measurement import TimingStats
from evolve.evaluate.plan import LaunchPlan
from evolve.settings import TimingSettings
from evolve.task.task import Task, size_label

MAX_WARMUP_CALLS = 10_000


# Lines a candidate loaded under an evict_last policy (createpolicy + ld.L2::cache_hint,
# prefetch.L2::evict_last) outlive a plain memset of twice the L2: a kernel could find its inputs
# L2-resident in the next timed call. Before its inputs are written anew, every line of the
# candidate's buffers is demoted to evict_normal (applypriority keeps the data: the guards around
# each buffer are not rewritten, and discard would leave them undefined), and the flush first
# touches its own buffer under evict_last, so that pinned lines anywhere compete with it, demotes
# and drops its lines, then memsets it: no eviction priority survives into the timed window.
_FORGET = cp.RawKernel(r"""
extern "C" __global__ void l2_forget(char* p, unsigned long long lines, int how) {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < lines;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        char* a = p + i * 128;
        if (how == 1) {
            unsigned v;  // asm volatile: the load stays though its value is unused
            asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;"
                         : "=r"(v) : "l"(a), "l"(policy) : "memory");
        } else {
            asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(a) : "memory");
            if (how == 2) asm volatile("discard.global.L2 [%0], 128;" :: "l"(a) : "memory");
        }
    }
}
""", "l2_forget", options=("-std=c++17",))
_FORGET_GRID, _FORGET_BLOCK = 1024, 256


def forget(array: Any, pin: bool = False, drop: bool = False) -> None:
    """Demote the L2 lines of a device array's whole allocation to evict_normal (``pin``: touch
    them under evict_last instead; ``drop``: also discard them, leaving their bytes undefined).
    CuPy's pool hands out blocks in multiples of 512 bytes, so a 128-byte line past the array's end
    is the array's own padding."""
    lines = (array.nbytes + 127) // 128
    if lines:
        how = 1 if pin else 2 if drop else 0
        _FORGET((_FORGET_GRID,), (_FORGET_BLOCK,), (array, np.uint64(lines), np.int32(how)))


class L2Flush:
    """A buffer twice the L2's size: touched under evict_last, its lines dropped, then memset, it
    evicts whatever a candidate left in the L2, however the candidate marked it."""

    def __init__(self, l2_bytes: int):
        self.buffer = cp.empty(max(2 * l2_bytes, 1 << 26), dtype=cp.uint8)

    def __call__(self) -> None:
        forget(self.buffer, pin=True)
        forget(self.buffer, drop=True)  # its bytes are memset next
        self.buffer.data.memset_async(0xA5, self.buffer.nbytes)


def enough(stats: TimingStats, elapsed_s: float, s: Any) -> bool:
    """The one stopping rule of every timing (the harness's and the benchmark's): at least
    ``min_samples``, then until the spread is small, ``max_time_s`` has passed or ``max_samples``."""
    return stats.n >= s.max_samples or (stats.n >= s.min_samples and (
        stats.rel_iqr <= s.target_rel_iqr or elapsed_s > s.max_time_s))


def time_at(loaded: Loaded, task: Task, plan: LaunchPlan, sizes: Mapping[str, int], s: TimingSettings,
            flush: L2Flush, seed: Callable[..., int]) -> TimingStats:
    """The candidate's time at one size (CUDA events, median of checked calls)."""
    label = size_label(sizes)
    io = {**buffers.guarded_io(task, sizes), **buffers.guarded_scratch(plan)}
    bufs = buffers.views(io)
    rng = np.random.default_rng(seed(label, "fill"))
    calls = 0

    def call() -> tuple[int, dict[str, float | int], tuple[Any, Any]]:
        nonlocal calls
        calls += 1
        input_seed = seed(label, calls)
        for g in io.values():  # no line of the candidate's memory keeps a priority it gave it
            forget(g.base)
        task.fill_inputs(cp, bufs, input_seed, sizes)
        fills = buffers.poison(task, plan, bufs, rng)
        flush()  # last: nothing touches the candidate's memory between the flush and the launch
        events = cp.cuda.Event(), cp.cuda.Event()
        events[0].record()
        loaded.run(plan, bufs)
        events[1].record()
        return input_seed, fills, events

    def elapsed(events: tuple[Any, Any]) -> float:
        return cp.cuda.get_elapsed_time(*events) / 1e3

    _, _, first = call()
    synchronize(f"while warming up at {label}")
    est_ms = max(elapsed(first) * 1e3, 1e-3)
    for _ in range(min(max(s.warmup_min, math.ceil(s.warmup_ms / est_ms)), MAX_WARMUP_CALLS)):
        call()
    synchronize(f"while warming up at {label}")

    samples: list[float] = []
    t_begin = time.perf_counter()
    while True:
        input_seed, fills, events = call()
        synchronize(f"in a timed call at {label}")
        verify(task, sizes, bufs, io, fills, input_seed, f"in a timed call at {label}")
        samples.append(elapsed(events))
        stats = TimingStats.of(samples)
        if enough(stats, time.perf_counter() - t_begin, s):
            return stats
