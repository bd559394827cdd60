"""Roofline figures of a measurement: achieved bandwidth and FLOP rate against the ceilings."""

from __future__ import annotations

from collections.abc import Mapping

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


def compute_bound(task: Task, hw: Hardware) -> bool:
    """At the first timing size, the task's FLOPs at the fp32 peak take longer than its bytes at the
    bandwidth ceiling (sgemm): its speed is judged in FLOP/s, not GB/s."""
    sizes = task.timing_sizes[0]
    return bool(hw.peak_fp32_flops) and (
        task.flops(sizes) / hw.peak_fp32_flops > task.bytes(sizes) / hw.bandwidth_ceiling)


def headline(figures: Mapping[str, float], task: Task, hw: Hardware) -> str:
    """The figure a result is judged by, against the ceiling it is divided by (a trial's
    :func:`roofline` attributes)."""
    if compute_bound(task, hw):
        tflops = figures.get("tflops", 0.0)
        return (f"{tflops:.1f} TFLOP/s = {100e12 * tflops / hw.peak_fp32_flops:.1f}% of the datasheet "
                f"{hw.peak_fp32_flops / 1e12:.1f} TFLOP/s fp32 peak")
    source = "measured" if hw.measured_ceilings() else "datasheet"
    fraction = figures.get("bandwidth_fraction", 0.0)
    return (f"{figures.get('gbps', 0.0):.0f} GB/s = {100 * fraction:.1f}% of the {source} "
            f"{hw.bandwidth_ceiling / 1e9:.0f} GB/s bandwidth ceiling")
