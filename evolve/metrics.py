"""Roofline figures of a measurement: achieved bandwidth and FLOP rate against the ceilings."""

from __future__ import annotations

from evolve.hardware import Hardware
from evolve.measurement import Measurement
from evolve.task import Task, size_label


def roofline(m: Measurement, task: Task, hw: Hardware) -> dict[str, float]:
    """Figures at the task's first timing size (the one the report leads with)."""
    sizes = task.timing_sizes[0]
    t = m.timings[size_label(sizes)].median_s
    nbytes, flops = task.bytes(sizes), task.flops(sizes)
    floor = max(
        nbytes / hw.bandwidth_ceiling,
        flops / hw.peak_fp32_flops if hw.peak_fp32_flops else 0.0,
    )
    return {
        "time_ms": t * 1e3,
        "gbps": nbytes / t / 1e9,
        "tflops": flops / t / 1e12,
        "bandwidth_fraction": nbytes / t / hw.bandwidth_ceiling,
        "roofline_fraction": floor / t,
    }
