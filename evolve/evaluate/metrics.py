"""Roofline figures of a measurement: achieved bandwidth and FLOP rate against the ceilings.

A task names the compute peak that bounds it (``traffic.peak``: fp32 FMA by default, a tensor-core
format, or ``memory``); at its first timing size it is memory-bound or compute-bound by whichever
floor (bytes over the measured bandwidth ceiling, FLOPs over that datasheet peak) is higher, and
the figure that matters leads: GB/s for memory-bound, TFLOP/s for compute-bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evolve.evaluate.measurement import Measurement
from evolve.hardware import Hardware
from evolve.task.task import Task, size_label

SUSPECT = 1.02  # a fraction of a ceiling above this is a bug or a cheat, not a result


def _floors(task: Task, hw: Hardware) -> tuple[float, float]:
    """Seconds the first timing size needs at the bandwidth ceiling and at the compute peak."""
    sizes = task.timing_sizes[0]
    peak = 0.0 if task.peak == "memory" else hw.peak(task.peak)
    return task.bytes(sizes) / hw.bandwidth_ceiling, task.flops(sizes) / peak if peak else 0.0


def bound(task: Task, hw: Hardware) -> str:
    """``compute`` or ``memory``: which ceiling limits the task at its first timing size."""
    memory, compute = _floors(task, hw)
    return "compute" if compute > memory else "memory"


def roofline(m: Measurement, task: Task, hw: Hardware) -> dict[str, float]:
    """Figures at the task's first timing size (the one the report leads with)."""
    sizes = task.timing_sizes[0]
    t = m.timings[size_label(sizes)].median_s
    nbytes, flops = task.bytes(sizes), task.flops(sizes)
    peak = 0.0 if task.peak == "memory" else hw.peak(task.peak)
    return {
        "time_ms": t * 1e3,
        "gbps": nbytes / t / 1e9,
        "tflops": flops / t / 1e12,
        "bandwidth_fraction": nbytes / t / hw.bandwidth_ceiling,
        "compute_fraction": flops / t / peak if peak else 0.0,
        "roofline_fraction": max(_floors(task, hw)) / t,
    }


def peak_text(task: Task, hw: Hardware) -> str:
    """The compute peak a task is judged by, in words."""
    if task.peak == "memory":
        return "bounded by memory alone (no compute peak)"
    peak = hw.peak(task.peak)
    if not peak:
        return f"no {task.peak} peak on the {hw.name} datasheet: judged by memory alone"
    unit = "TOP/s" if task.peak.startswith("int") else "TFLOP/s"
    return f"{task.peak} peak {peak / 1e12:.1f} {unit} (datasheet)"


def headline(task: Task, hw: Hardware, attrs: Mapping[str, Any]) -> str:
    """The figure that matters for this task, from a trial's roofline attributes: GB/s against
    the measured bandwidth ceiling, or TFLOP/s against the compute peak."""
    gbps, frac = attrs.get("gbps", 0.0), attrs.get("bandwidth_fraction", 0.0)
    roof = f"{100 * attrs.get('roofline_fraction', 0.0):.1f}% of the roofline"
    memory = f"{gbps:.0f} GB/s = {100 * frac:.1f}% of the measured {hw.bandwidth_ceiling / 1e9:.0f} GB/s " \
             "bandwidth ceiling"
    if bound(task, hw) == "memory":
        flag = " — ABOVE THE CEILING: check the kernel" if frac > SUSPECT else ""
        return f"{memory} ({roof}){flag}"
    unit = "TOP/s" if task.peak.startswith("int") else "TFLOP/s"
    cf = attrs.get("compute_fraction", 0.0)
    flag = " — ABOVE THE PEAK: check the kernel" if cf > SUSPECT or frac > SUSPECT else ""
    return (f"{attrs.get('tflops', 0.0):.1f} {unit} = {100 * cf:.1f}% of the {hw.peak(task.peak) / 1e12:.1f} "
            f"{unit} {task.peak} datasheet peak ({gbps:.0f} GB/s; {roof}){flag}")
