"""Judging outputs against the float64 reference, and admitting only tasks that can judge.

The same code runs on NumPy and CuPy arrays, which hold each dtype alike (:mod:`evolve.dtypes`).
Outputs are pre-filled before every launch with a value the kernel must overwrite: NaN for
floating-point outputs, a fresh random value for integer ones (compared exactly), a byte that is
neither 0 nor 1 for bool. An inout argument starts as an input, so only its final values are
compared. A task whose check a trivial kernel could pass (no-op, zeros, a constant, a copy of an
input) would reward cheating, so it is not admitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.task.stress import max_finite, min_normal
from evolve.task.task import Task, Tolerance


def unwritten_fill(dtype: str, rng: np.random.Generator) -> float | int:
    """What an output holds before a launch, as its storage holds it (see dtypes.unwritten)."""
    return dtypes.unwritten(dtype, rng)


def compare(xp: Any, name: str, out: Any, ref: Any, tol: Tolerance | None,
            fill: float | int | None = math.nan, dtype: str | None = None) -> str | None:
    """None if ``out`` matches ``ref`` within tolerance (integers and bool: exactly), else the
    reason it does not. ``out`` is in the storage of ``dtype`` (default: its own array dtype);
    ``fill`` is what it held before the launch (None: an inout, which held its input)."""
    if tuple(out.shape) != tuple(ref.shape):
        return f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
    d = dtypes.get(dtype) if dtype else dtypes.of_array(out)
    if d.exact:
        return _compare_exact(xp, name, out.ravel(), ref.ravel(), d, None if fill is None else int(fill))
    assert tol is not None
    o = dtypes.widen(xp, out, d.name).ravel()
    r = ref.ravel()
    if fill is not None:
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


def _compare_exact(xp: Any, name: str, o: Any, ref: Any, d: dtypes.DType, fill: int | None) -> str | None:
    lo, hi = d.range()
    r = xp.rint(ref)
    if not bool(xp.isfinite(r).all()) or bool(((r < lo) | (r > hi)).any()):
        return f"{name}: the reference is not a value of {d.name} (an integer in [{lo}, {hi}])"
    r = r.astype(xp.int64)
    o = o.astype(xp.int64)
    if fill is not None:
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


def unjudgeable(xp: Any, task: Task, refs: Mapping[str, Any]) -> str | None:
    """Why a round's float64 reference cannot judge it (an output's values do not fit its dtype:
    NaN, infinite, beyond its largest finite value, or all below its smallest normal one, where
    the tolerance, relative to max|ref|, asks for digits the dtype does not have), or None; a
    stress round may go past what a task's outputs hold, and is then skipped instead of failing
    every kernel."""
    for arg in task.outputs:
        d = dtypes.get(arg.dtype)
        r = refs[arg.name]
        if d.exact or r.size == 0:
            continue
        top = max_finite(d.name) if d.name != "float64" else float(np.finfo(np.float64).max)
        if not bool(xp.isfinite(r).all()):
            return f"the reference of {arg.name} is not finite"
        largest = float(xp.abs(r).max())
        if largest > top:
            return f"the reference of {arg.name} exceeds {d.name}'s largest value {top:.4g}"
        if 0 < largest < min_normal(d.name):
            return f"the reference of {arg.name} is below {d.name}'s smallest normal value"
    return None


def compare_all(xp: Any, task: Task, outputs: Mapping[str, Any], refs: Mapping[str, Any],
                fills: Mapping[str, float | int] | None = None,
                sizes: Mapping[str, int] | None = None) -> str | None:
    """The first output (or inout) that does not match, or None; ``fills`` holds what each
    output held before the launch (inouts held their input: no fill); ``sizes`` the problem
    sizes (a tolerance that grows with them needs them)."""
    for arg in task.outputs:
        fill = None if arg.role == "inout" else (fills or {}).get(arg.name, math.nan)
        reason = compare(xp, arg.name, outputs[arg.name], refs[arg.name], task.tolerance_for(arg, sizes),
                         fill, arg.dtype)
        if reason:
            return reason
    return None


def trivial_outputs(task: Task, sizes: Mapping[str, int], inputs: Mapping[str, Any],
                    unrelated: Mapping[str, Any],
                    fills: Mapping[str, float | int]) -> dict[str, dict[str, Any]]:
    """What kernels that compute nothing would leave in the outputs (in their storage)."""
    cases: dict[str, dict[str, Any]] = {"no-op": {}, "zeros": {}, "constant": {}, "identity": {}}
    first = task.inputs[0]
    first_input = dtypes.widen(np, inputs[first.name], first.dtype).ravel()
    for arg in task.outputs:
        shape = task.shape(arg, sizes)
        store = dtypes.storage(arg.dtype)
        n = int(np.prod(shape))
        if arg.role == "inout":  # a no-op leaves the input where the result should be
            cases["no-op"][arg.name] = inputs[arg.name].copy()
        else:
            cases["no-op"][arg.name] = np.full(shape, fills[arg.name], dtype=store)
        cases["zeros"][arg.name] = np.zeros(shape, dtype=store)
        # a value that does not depend on this round's inputs: a constant baked into a kernel
        constant = np.full(n, float(np.mean(unrelated[arg.name])), dtype=np.float32)
        cases["constant"][arg.name] = dtypes.store(constant, arg.dtype).reshape(shape)
        ident = np.resize(first_input, n).astype(np.float32)
        cases["identity"][arg.name] = dtypes.store(ident, arg.dtype).reshape(shape)
    return cases


def admit(task: Task, seed: int = 12345) -> None:
    """Refuse a task whose correctness check a trivial kernel passes at every size."""
    uncaught = {"no-op", "zeros", "constant", "identity"}
    rng = np.random.default_rng(seed)
    fills = {a.name: unwritten_fill(a.dtype, rng) for a in task.fresh_outputs}
    constant = True  # the reference the same for other inputs, at every size
    for i, sizes in enumerate(task.correctness_sizes):
        inputs = task.make_inputs(np, sizes, seed + i)
        refs = task.expected(np, inputs, sizes)
        other = task.expected(np, task.make_inputs(np, sizes, seed + 1000 + i), sizes)
        constant = constant and all(np.array_equal(refs[k], other[k], equal_nan=True) for k in refs)
        for case, outs in trivial_outputs(task, sizes, inputs, other, fills).items():
            if case in uncaught and compare_all(np, task, outs, refs, fills, sizes):
                uncaught.discard(case)
    if uncaught and constant:
        raise EvolveError(
            f"task {task.name} is not admitted: its reference gives the same outputs for other inputs at "
            "every size (what it computes is a constant, such as x - x.mean(dim) over a dimension of "
            "1 element): there is nothing for a kernel to compute, and a constant kernel would pass"
        )
    if uncaught:
        raise EvolveError(
            f"task {task.name} is not admitted: a trivial kernel ({', '.join(sorted(uncaught))}) "
            "passes its correctness check at every size; tighten its tolerance or add sizes"
        )


def warm_up(xp: Any, task: Task) -> None:
    """The harness's own work for this task's dtypes, once, at its first correctness size: inputs
    made, the reference, a comparison of every output. CuPy compiles each of its kernels on first
    use (27 s for an int32-output task on a fresh machine): the GPU worker does this as it starts,
    before the search's clock, instead of in the first trial. The comparison's verdict (an
    unwritten output) is not the point and is ignored."""
    sizes = task.correctness_sizes[0]
    inputs = task.make_inputs(xp, sizes, 0)
    refs = task.expected(xp, inputs, sizes)
    outputs = {a.name: inputs[a.name] if a.role == "inout" else
               xp.zeros(task.shape(a, sizes), dtype=dtypes.storage(a.dtype)) for a in task.outputs}
    fills = {a.name: unwritten_fill(a.dtype, np.random.default_rng(0)) for a in task.outputs}
    compare_all(xp, task, outputs, refs, fills)
