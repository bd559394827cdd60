"""Stress rounds: correctness inputs that expose numerically unstable kernels.

The ordinary rounds draw values of moderate size (a softmax row never exceeds |x| ~ 44, a
layernorm row's |mean|/std stays near 2), so a softmax without the max subtraction or a layernorm
with the one-pass variance ``E[x^2] - E[x]^2`` passes them and is wrong on real data. Each
correctness size therefore also gets one round per stress, generic ones for every task plus the
task's own (``stress.rounds`` in the task file):

- ``exp``: the largest magnitudes a little beyond ``ln(max)`` of the argument's dtype (88.7 for
  float32), where exp overflows unless the kernel subtracts the maximum first;
- ``offset``: a mean 32 to 64 standard deviations away from zero (the sign the task's own values
  allow; scaled down, if need be, to magnitudes up to ``ln(max) / 2`` so that exp still holds
  them), where a one-pass variance or any difference of large sums cancels catastrophically;
- ``huge`` and ``tiny``: the task's distribution scaled to about ``max**(1/4)`` and
  ``max**(-1/4)`` of the dtype, where hidden absolute epsilons and fixed scales break while
  products of up to three values and their sums still fit.

A stress only changes a round's draw (:class:`evolve.task.inputs.Draw`): the values are still a
function of the seed and the draw, made alike on the host and on the GPU. A round whose float64
reference does not fit an output's dtype cannot judge anything and is skipped (``backend=check``
names such rounds). Integer and bool distributions are never stressed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from evolve import dtypes
from evolve.task.inputs import Draw, Init, parse_init

GENERIC = ("exp", "offset", "huge", "tiny")
_F32_MAX = float(np.finfo(np.float32).max)  # values are generated in float32 whatever the dtype


@dataclass(frozen=True)
class Stress:
    """One stress round: a generic one (``inits`` empty) or the task's own, whose ``inits``
    replace the named inputs' distributions for that round."""

    name: str
    inits: tuple[tuple[str, Init], ...] = ()

    @property
    def generic(self) -> bool:
        return not self.inits


def max_finite(dtype: str) -> float:
    """The largest finite value of a float dtype (float64's capped at float32's: values are made
    in float32)."""
    d = dtypes.get(dtype)
    if d.name == "bfloat16":
        return float.fromhex("0x1.fep127")
    if d.bits:
        table = dtypes.widen(np, np.arange(256, dtype=np.uint8), d.name)
        return float(np.nanmax(np.abs(table[np.isfinite(table)])))
    return min(float(np.finfo(d.storage).max), _F32_MAX)


def min_normal(dtype: str) -> float:
    """The smallest positive normal value of a float dtype."""
    d = dtypes.get(dtype)
    special = {"bfloat16": 2.0**-126, "float8_e4m3fn": 2.0**-6, "float8_e5m2": 2.0**-14}
    return special.get(d.name) or float(np.finfo(d.storage).tiny)


def _magnitude(d: Draw) -> float:
    """About the largest |value| of a draw (four standard deviations past the shift)."""
    if d.dist == "normal":
        return abs(d.b) + 4 * abs(d.a)
    if d.dist == "ties":
        return abs(d.b) + abs(d.a) * d.hi / 2
    return max(abs(d.a), abs(d.b))


def _sign(init: Init, d: Draw, u: float) -> float:
    """The sign an offset takes: the one the task's values (uniform) or shifts keep, else either
    (from ``u``)."""
    lo, hi = (d.a, d.b) if d.dist == "uniform" else init.shift
    if lo >= 0:
        return 1.0
    if hi <= 0:
        return -1.0
    return 1.0 if u < 0.5 else -1.0


def stressed(init: Init, d: Draw, stress: str, dtype: str, u: tuple[float, float]) -> Draw:
    """``d`` under a generic stress; ``u`` are two uniforms in [0, 1) drawn for this argument."""
    if d.dist not in ("normal", "ties", "uniform") or dtypes.get(dtype).kind != "float":
        return d
    top = max_finite(dtype)
    if stress == "offset":  # at magnitudes up to ln(max) / 2: the exp round is the one past it
        sign = _sign(init, d, u[1])
        if d.dist == "uniform":
            width = d.b - d.a
            center = sign * width * (9 + 9 * u[0])  # 32..64 standard deviations (width / sqrt 12)
            off = Draw("uniform", a=center - width / 2, b=center + width / 2)
        else:
            off = Draw(d.dist, a=d.a, b=sign * abs(d.a) * (32 + 32 * u[0]), hi=d.hi)
        m, cap = _magnitude(off), math.log(top) / 2
        f = cap / m if m > cap else 1.0
        return Draw(off.dist, a=off.a * f, b=off.b * f, hi=off.hi)
    target = {"exp": math.log(top) * (1.1 + 0.4 * u[0]),
              "huge": top ** 0.25 * (0.5 + 0.5 * u[0]),
              "tiny": top ** -0.25 * (1 + u[0])}[stress]
    m = _magnitude(d)
    f = target / m if m > 0 else 1.0
    return Draw(d.dist, a=d.a * f, b=d.b * f, hi=d.hi)


def parse(cfg: Mapping[str, object] | None, inputs: Mapping[str, str]) -> tuple[Stress, ...]:
    """A task's ``stress`` mapping: ``generic`` (which generic rounds, default all) and
    ``rounds`` (name -> {input: init}); ``inputs`` maps each input to its dtype. ValueError says
    what is wrong."""
    cfg = dict(cfg or {})
    if extra := set(cfg) - {"generic", "rounds"}:
        raise ValueError(f"stress takes generic and rounds, not {sorted(extra)}")
    generic = cfg.get("generic", list(GENERIC))
    if not isinstance(generic, list) or not set(generic) <= set(GENERIC):
        raise ValueError(f"stress.generic must be a list of {', '.join(GENERIC)}")
    out = [Stress(str(g)) for g in generic]
    rounds = cfg.get("rounds") or {}
    if not isinstance(rounds, Mapping):
        raise ValueError("stress.rounds must map a round's name to {input: init}")
    for name, inits in rounds.items():
        if name in GENERIC or not isinstance(inits, Mapping) or not inits:
            raise ValueError(f"stress round {name!r}: give it a name of its own and an init per input")
        if unknown := set(inits) - set(inputs):
            raise ValueError(f"stress round {name!r}: {sorted(unknown)} are not inputs")
        parsed = []
        for arg, init in inits.items():
            try:
                parsed.append((str(arg), parse_init(init, inputs[arg])))
            except ValueError as exc:
                raise ValueError(f"stress round {name!r}, {arg}: {exc}") from None
        out.append(Stress(str(name), tuple(parsed)))
    return tuple(out)
