"""Judging outputs against the float64 reference, and admitting only tasks that can judge.

The same code runs on NumPy and CuPy arrays. A task whose check a trivial kernel could pass
(no-op, zeros, a constant, a copy of an input) would reward cheating, so it is not admitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evolve.errors import EvolveError
from evolve.task import Task, Tolerance


def compare(xp: Any, name: str, out: Any, ref: Any, tol: Tolerance) -> str | None:
    """None if ``out`` matches ``ref`` within tolerance, else the reason it does not."""
    if tuple(out.shape) != tuple(ref.shape):
        return f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
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


def compare_all(xp: Any, task: Task, outputs: Mapping[str, Any], refs: Mapping[str, Any]) -> str | None:
    for arg in task.outputs:
        reason = compare(xp, arg.name, outputs[arg.name], refs[arg.name], task.tolerance)
        if reason:
            return reason
    return None


def trivial_outputs(task: Task, sizes: Mapping[str, int], inputs: Mapping[str, Any],
                    unrelated: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What kernels that compute nothing would leave in the outputs."""
    cases: dict[str, dict[str, Any]] = {"no-op": {}, "zeros": {}, "constant": {}, "identity": {}}
    first_input = next(iter(inputs.values())).ravel()
    for arg in task.outputs:
        shape = task.shape(arg, sizes)
        cases["no-op"][arg.name] = np.full(shape, np.nan, dtype=arg.dtype)
        cases["zeros"][arg.name] = np.zeros(shape, dtype=arg.dtype)
        # a value that does not depend on this round's inputs: a constant baked into a kernel
        cases["constant"][arg.name] = np.full(shape, float(np.mean(unrelated[arg.name])), dtype=arg.dtype)
        ident = np.resize(first_input, int(np.prod(shape))).reshape(shape)
        cases["identity"][arg.name] = ident.astype(arg.dtype)
    return cases


def admit(task: Task, seed: int = 12345) -> None:
    """Refuse a task whose correctness check a trivial kernel passes at every size."""
    uncaught = {"no-op", "zeros", "constant", "identity"}
    for i, sizes in enumerate(task.correctness_sizes):
        inputs = task.make_inputs(np, sizes, seed + i)
        refs = task.expected(np, inputs, sizes)
        other = task.expected(np, task.make_inputs(np, sizes, seed + 1000 + i), sizes)
        for case, outs in trivial_outputs(task, sizes, inputs, other).items():
            if case in uncaught and compare_all(np, task, outs, refs):
                uncaught.discard(case)
    if uncaught:
        raise EvolveError(
            f"task {task.name} is not admitted: a trivial kernel ({', '.join(sorted(uncaught))}) "
            "passes its correctness check at every size; tighten its tolerance or add sizes"
        )
