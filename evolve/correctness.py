"""Judging outputs against the float64 reference, and admitting only tasks that can judge.

The same code runs on NumPy and CuPy arrays. Outputs are pre-filled before every launch with a
value the kernel must overwrite: NaN for floating-point outputs, a fresh random value for integer
ones (compared exactly). A task whose check a trivial kernel could pass (no-op, zeros, a
constant, a copy of an input) would reward cheating, so it is not admitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from evolve.errors import EvolveError
from evolve.task import Task, Tolerance


def unwritten_fill(dtype: Any, rng: np.random.Generator) -> float | int:
    """What an output holds before a launch: NaN, or for integers a value drawn from ``rng``
    (a kernel cannot count on a fixed one happening to be right)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return float("nan")
    info = np.iinfo(dt)
    return int(rng.integers(info.min, info.max, endpoint=True))


def compare(xp: Any, name: str, out: Any, ref: Any, tol: Tolerance,
            fill: float | int = math.nan) -> str | None:
    """None if ``out`` matches ``ref`` within tolerance (integers: exactly), else the reason it
    does not; ``fill`` is what the output held before the launch."""
    if tuple(out.shape) != tuple(ref.shape):
        return f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
    if out.dtype.kind in "iu":
        return _compare_exact(xp, name, out.ravel(), ref.ravel(), int(fill))
    o = out.astype(xp.float64).ravel()
    r = ref.ravel()
    unwritten = xp.isnan(o) & ~xp.isnan(r)
    n_unwritten = int(unwritten.sum())
    if n_unwritten:
        first = int(xp.argmax(unwritten))
        return f"{name}: {n_unwritten} of {o.size} elements not written (first at index {first})"
    err = xp.abs(o - r)
    bound = tol.atol * float(xp.abs(r).max()) + tol.rtol * xp.abs(r)
    bad = ~(err <= bound)  # NaN and inf count as bad
    n_bad = int(bad.sum())
    if n_bad:
        i = int(xp.argmax(xp.where(bad, xp.nan_to_num(err, nan=np.inf), -1.0)))
        return (
            f"{name}: {n_bad} of {o.size} elements outside tolerance; worst at index {i}: "
            f"got {float(o[i]):.7g}, expected {float(r[i]):.7g}"
        )
    norm = float(xp.linalg.norm(r))
    rel_l2 = float(xp.linalg.norm(o - r)) / (norm if norm > 0 else 1.0)
    if not rel_l2 <= tol.l2:
        return f"{name}: relative L2 error {rel_l2:.3g} exceeds {tol.l2:.3g}"
    return None


def _compare_exact(xp: Any, name: str, o: Any, ref: Any, fill: int) -> str | None:
    r = xp.rint(ref)
    if not bool(xp.isfinite(r).all()) or bool((xp.abs(r) >= 2.0**63).any()):
        return f"{name}: the reference is not an integer of this dtype"
    r = r.astype(xp.int64)
    o = o.astype(xp.int64)
    unwritten = (o == fill) & (r != fill)
    if n_unwritten := int(unwritten.sum()):
        first = int(xp.argmax(unwritten))
        return f"{name}: {n_unwritten} of {o.size} elements not written (first at index {first})"
    bad = o != r
    if n_bad := int(bad.sum()):
        i = int(xp.argmax(bad))
        return (f"{name}: {n_bad} of {o.size} elements differ; first at index {i}: "
                f"got {int(o[i])}, expected {int(r[i])}")
    return None


def compare_all(xp: Any, task: Task, outputs: Mapping[str, Any], refs: Mapping[str, Any],
                fills: Mapping[str, float | int] | None = None) -> str | None:
    for arg in task.outputs:
        fill = (fills or {}).get(arg.name, math.nan)
        reason = compare(xp, arg.name, outputs[arg.name], refs[arg.name], task.tolerance, fill)
        if reason:
            return reason
    return None


def trivial_outputs(task: Task, sizes: Mapping[str, int], inputs: Mapping[str, Any],
                    unrelated: Mapping[str, Any],
                    fills: Mapping[str, float | int]) -> dict[str, dict[str, Any]]:
    """What kernels that compute nothing would leave in the outputs."""
    cases: dict[str, dict[str, Any]] = {"no-op": {}, "zeros": {}, "constant": {}, "identity": {}}
    first_input = next(iter(inputs.values())).ravel()
    for arg in task.outputs:
        shape = task.shape(arg, sizes)
        cases["no-op"][arg.name] = np.full(shape, fills[arg.name], dtype=arg.dtype)
        cases["zeros"][arg.name] = np.zeros(shape, dtype=arg.dtype)
        # a value that does not depend on this round's inputs: a constant baked into a kernel
        cases["constant"][arg.name] = np.full(shape, float(np.mean(unrelated[arg.name])), dtype=arg.dtype)
        ident = np.resize(first_input, int(np.prod(shape))).reshape(shape)
        cases["identity"][arg.name] = ident.astype(arg.dtype)
    return cases


def admit(task: Task, seed: int = 12345) -> None:
    """Refuse a task whose correctness check a trivial kernel passes at every size."""
    uncaught = {"no-op", "zeros", "constant", "identity"}
    rng = np.random.default_rng(seed)
    fills = {a.name: unwritten_fill(a.dtype, rng) for a in task.outputs}
    for i, sizes in enumerate(task.correctness_sizes):
        inputs = task.make_inputs(np, sizes, seed + i)
        refs = task.expected(np, inputs, sizes)
        other = task.expected(np, task.make_inputs(np, sizes, seed + 1000 + i), sizes)
        for case, outs in trivial_outputs(task, sizes, inputs, other, fills).items():
            if case in uncaught and compare_all(np, task, outs, refs, fills):
                uncaught.discard(case)
    if uncaught:
        raise EvolveError(
            f"task {task.name} is not admitted: a trivial kernel ({', '.join(sorted(uncaught))}) "
            "passes its correctness check at every size; tighten its tolerance or add sizes"
        )
