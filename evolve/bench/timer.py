"""One timing protocol for every implementation in a benchmark (ours and the peers'): a
warm-up, the harness's L2 flush before every sample (outside the timed window), CUDA events
around each call, batches until the harness's stopping rule says enough (``evolve.evaluate.gpu.
timing``: the flush and the rule have one home), and several rounds interleaved across
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
                      s: TimerSettings = TimerSettings(),
                      after: Mapping[str, Callable[[], Any]] | None = None) -> dict[str, TimingStats]:
    """Median and IQR of each callable, all timed on the current stream the same way.
    ``after[name]`` runs after each timed call of ``name``, outside its window and before the
    next flush: work it queues without a host sync (a check of that call's output) times nothing."""
    from evolve.evaluate.gpu.timing import L2Flush

    flush = L2Flush(l2_bytes)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for order in round_orders(list(fns), s.rounds):
        for name in order:
            samples[name] += _round(fns[name], flush, s, (after or {}).get(name))
    return {name: TimingStats.of(xs) for name, xs in samples.items()}


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The order of each round: as given, then reversed, alternately (ABBA), so that each
    implementation follows a different neighbour in half of the rounds and linear drift cancels."""
    return [names if r % 2 == 0 else names[::-1] for r in range(rounds)]


def _round(fn: Callable[[], Any], flush: Any, s: TimerSettings,
           after: Callable[[], Any] | None = None) -> list[float]:
    import cupy as cp

    from evolve.evaluate.gpu.timing import enough

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
            flush()
            ev = cp.cuda.Event(), cp.cuda.Event()
            ev[0].record()
            fn()
            ev[1].record()
            if after is not None:
                after()
            events.append(ev)
        cp.cuda.Device().synchronize()
        out += [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in events]
        if enough(TimingStats.of(out), time.perf_counter() - t0, s):
            return out
