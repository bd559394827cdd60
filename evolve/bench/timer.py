"""One timing protocol for every implementation in a benchmark (ours and the peers'): a
warm-up, an L2 flush before every sample (outside the timed window), CUDA events around each
call, batches until the IQR is small or a limit is hit, and several rounds interleaved across
the implementations so that clock or thermal drift hits them all alike. Every other round runs
them in reverse order: on a GPU held at its power cap, what ran just before a kernel changes its
clock, and a fixed order would hand one implementation the same hot predecessor every round."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evolve.evaluate.measurement import TimingStats


@dataclass(frozen=True)
class TimerSettings:
    rounds: int = 3  # interleaved rounds; the samples of all rounds are pooled
    warmup_ms: float = 25.0
    min_samples: int = 10  # per round
    max_samples: int = 50
    max_time_s: float = 1.0
    target_rel_iqr: float = 0.01


def time_side_by_side(fns: Mapping[str, Callable[[], Any]], l2_bytes: int,
                      s: TimerSettings = TimerSettings()) -> dict[str, TimingStats]:
    """Median and IQR of each callable, all timed on the current stream the same way."""
    import cupy as cp

    flush = cp.empty(max(2 * l2_bytes, 1 << 26), dtype=cp.uint8)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for order in round_orders(list(fns), s.rounds):
        for name in order:
            samples[name] += _round(fns[name], flush, s)
    return {name: TimingStats.of(xs) for name, xs in samples.items()}


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The order of each round: as given, then reversed, alternately (ABBA), so that each
    implementation follows a different neighbour in half of the rounds and linear drift cancels."""
    return [names if r % 2 == 0 else names[::-1] for r in range(rounds)]


def _round(fn: Callable[[], Any], flush: Any, s: TimerSettings) -> list[float]:
    import cupy as cp

    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    fn()
    end.record()
    end.synchronize()
    est_ms = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
    for _ in range(max(3, min(1000, int(s.warmup_ms / est_ms)))):
        fn()
    cp.cuda.Device().synchronize()
    out: list[float] = []
    t0 = time.perf_counter()
    while True:
        events = []
        for _ in range(s.min_samples):
            flush.data.memset_async(0xA5, flush.nbytes)
            ev = cp.cuda.Event(), cp.cuda.Event()
            ev[0].record()
            fn()
            ev[1].record()
            events.append(ev)
        cp.cuda.Device().synchronize()
        out += [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in events]
        stats = TimingStats.of(out)
        if (stats.rel_iqr <= s.target_rel_iqr or len(out) >= s.max_samples
                or time.perf_counter() - t0 > s.max_time_s):
            return out
