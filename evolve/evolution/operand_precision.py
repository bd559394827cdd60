"""What feeding float32 operands to the tensor cores costs in accuracy, against a task's tolerance.

The prompt lists the tensor cores' peaks so that a kernel aims at the fastest unit, but a model
that reads "tf32 tensor cores 495 TFLOP/s" for a float32 GEMM tends to round its operands to TF32
and is then judged wrong (the ninth session's KernelBench GEMMs: every TF32 child failed, by 1e-4,
at the timing size). The precise alternative, a split of each operand into a high and a low part
with three products (3xTF32, as CUTLASS does it), keeps float32 accuracy at a third of the unit's
peak, which on Hopper is still more than twice FFMA's. This paragraph says so with the task's own
numbers; it is rendered only where it matters: a compute-bound task with float32 inputs.

The split alone is not enough: the tensor cores' float32 accumulation is not round-to-nearest (it
truncates; Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021), so a long sum kept in
an MMA's accumulator drifts. On the H200 (eleventh session) 3xTF32 GEMMs that did so (7 children) were off
by up to 3e-5 relative L2 or 1.5e-4 elementwise at K=4096-8192 (bound 1e-5, 1e-4) and judged wrong
in timed calls; the four that summed each k-slice in a fresh accumulator and added it with
ordinary float adds all passed. The
verdicts below assume that (the simulation in tests/helpers/precision_models.py does the same).
"""

from __future__ import annotations

from evolve.evaluate.metrics import bound
from evolve.hardware import Hardware
from evolve.task.task import Task

# Tensor-core operand formats with float32's exponent range (so a split's low part is never lost
# to underflow or overflow), by peak name: their unit roundoff.
FORMATS = {"tf32_tensor": ("tf32", 2.0**-11), "bf16_tensor": ("bf16", 2.0**-8)}
MARGIN = 2.0  # an error within tolerance/MARGIN per product leaves room for the sum's own rounding


def tightest_bound(task: Task) -> float | None:
    """The smallest relative bound any output's tolerance sets (atol, rtol or relative L2 at its
    base; None where every output is compared exactly)."""
    bounds = [min(tol.atol, tol.rtol, tol.l2) for a in task.outputs if (tol := task.tolerance_for(a))]
    return min(bounds, default=None)


def note(task: Task, hw: Hardware) -> str:
    """One paragraph for the task block ("" where it does not apply)."""
    if bound(task, hw) != "compute" or not any(a.dtype == "float32" for a in task.inputs):
        return ""
    limit = tightest_bound(task)
    formats = [(name, u, hw.peak(peak)) for peak, (name, u) in FORMATS.items() if hw.peak(peak)]
    if limit is None or not formats:
        return ""
    fp32 = hw.peak("fp32")
    parts = []
    for name, u, peak in formats:
        plain, split = u, u * u
        verdict = "within" if plain <= limit / MARGIN else "too coarse"
        line = f"{name} (rounding an operand errs by up to {plain:.2g} of it): {verdict}"
        if verdict == "too coarse":
            fits = split <= limit / MARGIN
            line += (f"; split, about {split:.2g}: {'within' if fits else 'still too coarse'}"
                     + (f", at a third of its peak, {peak / 3e12:.0f} TFLOP/s against FFMA's "
                        f"{fp32 / 1e12:.0f}" if fits else ""))
        parts.append(line)
    return ("\nFloat32 operands on the tensor cores, against the tightest bound of this tolerance "
            f"({limit:.2g}): " + "; ".join(parts) + ". The split: hi = x rounded to the format, lo = x - hi "
            "(rounded again), and a*b as a_hi*b_hi + a_hi*b_lo + a_lo*b_hi, three products on the unit; "
            "operands fed to it as they are round to the format. Its float32 accumulator truncates, so "
            "a long sum kept in it drifts past this bound: sum each k-slice (a few dozen products) in a "
            "fresh accumulator and add it to float32 registers with ordinary adds.")
