"""TMA tensor maps as a launch spec declares them and as a plan resolves them at one size.

A kernel cannot encode a tensor map (``cuTensorMapEncodeTiled`` is a host call), so its spec
declares one over a task argument and the harness makes it (``evolve.evaluate.gpu.hopper``). Every
rule of the encoder is checked here first, from the argument's dtype and extents, so a map the
driver would refuse is a clear launch error before anything reaches the device. Figures are
innermost dimension first, as the encoder and ``cp.async.bulk.tensor`` take them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evolve.dtypes import ITEMSIZE
from evolve.errors import SpecError
from evolve.expr import Expr

SWIZZLES = (0, 32, 64, 128)  # swizzle spans in bytes (0: none)
MAX_RANK = 5
# cuTensorMapEncodeTiled's limits: box dims, the inner box's bytes, global dims and byte strides
MAX_BOX = 256
TMA_ALIGN = 16
MAX_TMA_DIM = 1 << 32
MAX_TMA_STRIDE = 1 << 40


@dataclass(frozen=True)
class TensorMapDecl:
    """A tensor map over the task argument ``buffer``, as the spec writes it."""

    name: str
    buffer: str
    box: tuple[Expr, ...]  # elements per dimension, innermost (contiguous) first, as TMA takes them
    swizzle: Expr  # the swizzle span in bytes, one of SWIZZLES (0: none)
    when: Expr | None = None  # sizes where the map is made; elsewhere the kernel gets 128 zero bytes


def declare(name: str, buffer: str, box: Any, swizzle: Any, when: Any) -> TensorMapDecl:
    """A declaration from the spec's YAML values (names already checked); SpecError if malformed."""
    if not isinstance(box, list) or not 1 <= len(box) <= MAX_RANK or not all(map(_scalar, box)):
        raise SpecError(f"tensor map {name}: 'box' must be a list of 1 to {MAX_RANK} expressions "
                        "(elements per dimension, innermost first)")
    if not _scalar(swizzle) or (isinstance(swizzle, int) and swizzle not in SWIZZLES):
        raise SpecError(f"tensor map {name}: swizzle must be none, 32, 64 or 128 (bytes) or an "
                        f"expression of the tunables, not {swizzle!r}")
    if when is not None and not _scalar(when):
        raise SpecError(f"tensor map {name}: 'when' must be a condition, e.g. K % 8 == 0")
    return TensorMapDecl(name, buffer, tuple(map(Expr, box)), Expr(0 if swizzle == "none" else swizzle),
                         None if when is None else Expr(when))


def _scalar(v: Any) -> bool:
    """An expression as YAML gives it: text or a number."""
    return isinstance(v, str | int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class TensorMap:
    """A tensor map over a task argument at one size, every figure innermost dimension first
    (cuTensorMapEncodeTiled's order); the worker encodes it over the argument's device buffer."""

    name: str
    buffer: str
    dtype: str
    dims: tuple[int, ...]  # the argument's extents: TMA clamps every box to them
    strides: tuple[int, ...]  # bytes from one index of dims[1:] to the next (rank - 1 of them)
    box: tuple[int, ...]
    swizzle: int  # span in bytes; 0: none



def resolve(m: TensorMapDecl, dtype: str, shape: tuple[int, ...], sizes: Mapping[str, int],
            env: Mapping[str, int]) -> TensorMap:
    """The map over an argument of ``dtype`` and ``shape`` (outermost first, as the task gives it)
    at these sizes (``env``: sizes and tunables), checked against cuTensorMapEncodeTiled's rules."""
    if len(m.box) != len(shape):
        raise SpecError(f"tensor map {m.name}: box has {len(m.box)} dimensions but {m.buffer} has "
                        f"{len(shape)} ({list(shape)})")
    if not 1 <= len(shape) <= MAX_RANK:
        raise SpecError(f"tensor map {m.name}: {m.buffer} has {len(shape)} dimensions "
                        f"(TMA takes 1 to {MAX_RANK})")
    item = ITEMSIZE[dtype]
    dims = tuple(reversed(shape))
    box = tuple(e.int_value(env) for e in m.box)
    for axis, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise SpecError(f"tensor map {m.name}: box[{axis}] = {b} at {dict(env)} (must be 1..{MAX_BOX})")
    inner = box[0] * item
    if inner % TMA_ALIGN:
        raise SpecError(f"tensor map {m.name}: the inner box dimension is {inner} bytes "
                        f"({box[0]} x {dtype}); TMA needs a multiple of {TMA_ALIGN}")
    swizzle = m.swizzle.int_value(env)
    if swizzle not in SWIZZLES:
        raise SpecError(f"tensor map {m.name}: swizzle {m.swizzle.text} = {swizzle} at {dict(env)} "
                        "(must be 0 for none, 32, 64 or 128)")
    if swizzle and inner > swizzle:
        raise SpecError(f"tensor map {m.name}: the inner box dimension is {inner} bytes, more than "
                        f"the {swizzle}-byte swizzle span")
    strides, stride = [], item
    for d in dims[:-1]:
        stride *= d
        strides.append(stride)
    if any(not 1 <= d <= MAX_TMA_DIM for d in dims):
        raise SpecError(f"tensor map {m.name}: {m.buffer}'s extents {list(shape)} at {dict(sizes)} "
                        f"must be 1..{MAX_TMA_DIM}")
    for axis, st in enumerate(strides, start=1):
        if st % TMA_ALIGN or st >= MAX_TMA_STRIDE:
            raise SpecError(f"tensor map {m.name}: {m.buffer}'s dimension {axis} (innermost first) has a "
                            f"stride of {st} bytes at {dict(sizes)}; TMA needs a multiple of {TMA_ALIGN} "
                            f"below 2^40")
    return TensorMap(m.name, m.buffer, dtype, dims, tuple(strides), box, swizzle)
