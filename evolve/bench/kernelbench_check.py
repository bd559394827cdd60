"""How a KernelBench measurement judges an implementation: its outputs against the float64 Model's,
within the tolerance of the dtype the Model returns (each element within atol*max|ref| + rtol*|ref|,
the relative L2 error bounded), on every checked input set and after every timed call.

Where PyTorch's own float32 Model misses that check at the Model's own parameters, the float64
output is rounding noise, not a value (KernelBench L2 23: the mean of a GroupNorm with unit weight
and zero bias is 0; float64 gives 1e-18, float32 eager 7e-9, and every implementation failed).
There each output's check also allows ``NOISE_FACTOR`` times eager's largest error (elementwise
and in L2): an implementation is held to PyTorch's own accuracy, no looser.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.task.correctness import compare
from evolve.task.task import Tolerance

Forward = Callable[..., Any]
NOISE_FACTOR = 2.0  # an implementation may be off by twice PyTorch's float32 error, where that is the floor


@dataclass(frozen=True)
class Floor:
    """The error one output may have beyond its tolerance: elementwise, and of the whole in L2."""

    elementwise: float = 0.0
    l2: float = 0.0


def in_float64(xs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]


def tensors(out: Any) -> list[Any]:
    """A forward's result as a list of tensors (one, or a tuple's)."""
    import torch

    xs = list(out) if isinstance(out, tuple | list) else [out]
    if not all(isinstance(x, torch.Tensor) for x in xs):
        raise EvolveError(f"the forward returned {type(out).__name__}, not tensors")
    return xs


def tolerance(dtype: Any) -> Tolerance | None:
    """The default tolerance of a torch dtype (None: compared exactly)."""
    tol = dtypes.get(str(dtype).removeprefix("torch.")).tolerance
    return None if tol is None else Tolerance(tol.atol, tol.rtol, tol.l2)


def check(got: Any, want: Sequence[Any], floors: Sequence[Floor] | None = None) -> str | None:
    """Why a forward's result is not the float64 reference's (None: it is), each output within the
    tolerance of the dtype the Model returns (and its floor, where there is one); ``want`` holds the
    reference's outputs, each with the dtype it must have (see ``Reference``)."""
    try:
        outs = tensors(got)
    except EvolveError as exc:
        return str(exc)
    if len(outs) != len(want):
        return f"{len(outs)} outputs, the Model returns {len(want)}"
    for i, (o, (r, dtype)) in enumerate(zip(outs, want, strict=True)):
        name = f"output {i}"
        if o.dtype != dtype:
            return f"{name}: dtype {o.dtype} != the Model's {dtype}"
        if not o.is_floating_point():
            o, r = o.long(), r.long()
        xp, (oa, ra) = _arrays(o.detach().double() if o.is_floating_point() else o, r)
        floor = floors[i] if floors else Floor()
        if floor == Floor() or not o.is_floating_point():
            reason = compare(xp, name, oa, ra, tolerance(dtype), fill=None)
        else:
            reason = _beyond_floor(xp, name, oa, ra, tolerance(dtype), floor)
        if reason is not None:
            return reason
    return None


def _beyond_floor(xp: Any, name: str, o: Any, r: Any, tol: Tolerance, floor: Floor) -> str | None:
    if tuple(o.shape) != tuple(r.shape):
        return f"{name}: shape {tuple(o.shape)} != expected {tuple(r.shape)}"
    err = xp.abs(o - r).ravel()
    bound = tol.atol * float(xp.abs(r).max()) + tol.rtol * xp.abs(r).ravel() + floor.elementwise
    if n_bad := int((~(err <= bound)).sum()):
        return (f"{name}: {n_bad} of {err.size} elements outside tolerance and twice PyTorch's float32 "
                f"error ({floor.elementwise:.3g})")
    if not float(xp.linalg.norm(err)) <= tol.l2 * float(xp.linalg.norm(r)) + floor.l2:
        return f"{name}: L2 error beyond the tolerance and twice PyTorch's float32 error ({floor.l2:.3g})"
    return None


def noise_floors(model: Forward, sets: list[list[Any]], refs: list[list[tuple[Any, Any]]]
                 ) -> list[Floor] | None:
    """Each output's floor where the float32 Model itself misses the check on some input set (None
    where it passes everywhere, or cannot be compared at all)."""
    import torch

    outs = [tensors(model(*xs)) for xs in sets]
    if all(check(o, want) is None for o, want in zip(outs, refs, strict=True)):
        return None
    floors = []
    for i, (_, dtype) in enumerate(refs[0]):
        if not dtype.is_floating_point:
            floors.append(Floor())
            continue
        errs = [(o[i].double() - want[i][0]) for o, want in zip(outs, refs, strict=True)]
        worst = max(float(e.abs().max()) for e in errs)
        l2 = max(float(torch.linalg.vector_norm(e)) for e in errs)
        if not (math.isfinite(worst) and math.isfinite(l2)):
            return None  # the Model's own float32 run overflows: no floor a kernel could be held to
        floors.append(Floor(NOISE_FACTOR * worst, NOISE_FACTOR * l2))
    return floors


def _arrays(*ts: Any) -> tuple[Any, list[Any]]:
    """Tensors as arrays of the module that judges them (NumPy on the CPU, CuPy on the GPU)."""
    if ts[0].is_cuda:
        import cupy as cp

        return cp, [cp.from_dlpack(t.contiguous()) for t in ts]
    return np, [t.cpu().numpy() for t in ts]


class Reference:
    """The Model in float64 (``Model.eval()``, ``no_grad()``), and its outputs for each input set, each
    with the dtype the float32 Model returns."""

    def __init__(self, model: Any, dtypes_out: list[Any]) -> None:
        self.model = copy.deepcopy(model).to(dtype=__import__("torch").float64)
        self.dtypes = dtypes_out

    def __call__(self, xs: Sequence[Any]) -> list[tuple[Any, Any]]:
        return [(r, d) for r, d in zip(tensors(self.model(*in_float64(xs))), self.dtypes, strict=True)]


def check_all(impls: dict[str, Forward], sets: list[list[Any]], refs: list[list[tuple[Any, Any]]],
              floors: Sequence[Floor] | None = None) -> tuple[dict[str, str], set[str]]:
    """Each implementation on every input set: the first reason each one fails, and those that
    raised (which cannot be timed)."""
    failed, raised = {}, set()
    for name, fn in impls.items():
        for k, (xs, want) in enumerate(zip(sets, refs, strict=True)):
            try:
                reason = check(fn(*xs), want, floors)
            except Exception as exc:
                reason = f"failed: {_line(exc)}"
                raised.add(name)
            if reason is not None:
                failed[name] = f"seed {k}: {reason}"
                break
    return failed, raised


class TimedCheck:
    """Every timed call's outputs against the reference of its inputs, judged on the device with no
    host sync (so that checking costs the timed window nothing) and read once at the end: the same
    rule as ``check`` (each element within atol*max|ref| + rtol*|ref|, relative L2 bounded, each
    beyond its floor where there is one)."""

    def __init__(self, refs: list[list[tuple[Any, Any]]], floors: Sequence[Floor] | None = None) -> None:
        import torch

        self.refs = refs
        self.floors = list(floors) if floors else [Floor()] * len(refs[0])
        self.bad = torch.zeros((), dtype=torch.int64, device=refs[0][0][0].device)
        self.calls = 0

    def __call__(self, got: Any, k: int) -> None:
        import torch

        self.calls += 1
        outs = tensors(got)
        ok = torch.ones((), dtype=torch.bool, device=self.bad.device)
        if len(outs) != len(self.refs[k]):
            ok = torch.zeros_like(ok)
        for o, (r, dtype), floor in zip(outs, self.refs[k], self.floors, strict=False):
            if o.shape != r.shape or o.dtype != dtype:
                ok = torch.zeros_like(ok)
                continue
            tol = tolerance(dtype)
            if tol is None:
                ok = ok & (o == r.to(o.dtype)).all()
                continue
            err = o.double() - r
            bound = tol.atol * r.abs().max() + tol.rtol * r.abs() + floor.elementwise
            norm = torch.linalg.vector_norm(r)
            l2 = tol.l2 * torch.where(norm > 0, norm, torch.ones_like(norm)) + floor.l2
            ok = ok & (err.abs() <= bound).all() & (torch.linalg.vector_norm(err) <= l2)
        self.bad += (~ok).long()

    def failures(self) -> int:
        return int(self.bad)


def _line(exc: BaseException) -> str:
    """An error as one clipped line (PyTorch says which keys did not load on its second line)."""
    from evolve.bench.kernelbench import clip

    return clip(str(exc).strip() or type(exc).__name__)
