"""Secret-seeded input values, written straight into buffers on the host (NumPy) or the GPU (CuPy).

A counter-based generator: element i of a buffer is a function of (seed, i) alone. The evaluator
writes fresh inputs into a candidate's buffers before every timed call and makes the same values
again after it, to check that nothing changed and to compute the reference. No generator state
lives in device memory, where a kernel could read or rewind it, and no copy of the inputs exists
while the kernel runs.

Distributions (an argument's ``init``): ``normal`` values scaled and shifted by factors drawn per
round (floats' default), ``uniform`` floats in [low, high), ``randint`` integers in [low, high]
(bounds may be expressions over the sizes, e.g. ``high: n - 1`` for indices; integers' default),
``ties`` (a few distinct levels, so equal values are common), ``permutation`` (each of 0..size-1
once: a Feistel bijection of the index, walked until it falls inside the buffer; no sort, no
state) and ``bernoulli`` 0/1 (bool's default). The GPU does the same arithmetic as NumPy, in one
kernel without temporaries, then stores each value in the argument's dtype (:mod:`evolve.dtypes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evolve import dtypes
from evolve.expr import Expr

DISTS = ("normal", "uniform", "randint", "ties", "permutation", "bernoulli")
INT_VALUED = ("randint", "permutation", "bernoulli")  # the others make float32 values
_KEYS = {"normal": {"scale", "shift"}, "uniform": {"low", "high"}, "randint": {"low", "high"},
         "ties": {"levels", "scale", "shift"}, "permutation": set(), "bernoulli": {"p"}}
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1, _MUL2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's finalizer
_M64 = (1 << 64) - 1
MAX_RANGE = 2**62  # randint: high - low + 1 at most this (the generator's arithmetic is 64-bit)


@dataclass(frozen=True)
class Init:
    """An argument's distribution; ``scale`` and ``shift`` are ranges drawn from per round."""

    dist: str = "normal"
    scale: tuple[float, float] = (0.5, 4.0)
    shift: tuple[float, float] = (-2.0, 2.0)
    low: Expr | None = None
    high: Expr | None = None
    levels: int = 8
    p: float = 0.5


@dataclass(frozen=True)
class Draw:
    """One round's parameters of one argument: a, b are scale and shift (normal, ties) or low and
    high (uniform); lo, hi the integer range (randint; ties: 0 .. levels - 1)."""

    dist: str
    a: float = 0.0
    b: float = 0.0
    lo: int = 0
    hi: int = 0
    p: float = 0.5


def parse_init(cfg: Mapping[str, Any] | None, dtype: str) -> Init:
    """An ``init`` mapping, with the dtype's default distribution; ValueError says what is wrong."""
    cfg = dict(cfg or {})
    kind = dtypes.get(dtype).kind
    dist = cfg.pop("dist", {"float": "normal", "int": "randint", "bool": "bernoulli"}[kind])
    if dist not in DISTS:
        raise ValueError(f"init.dist must be one of {', '.join(DISTS)}, got {dist!r}")
    if extra := set(cfg) - _KEYS[dist]:
        raise ValueError(f"init of a {dist} distribution takes {sorted(_KEYS[dist]) or 'nothing'}, "
                         f"not {sorted(extra)}")
    init = Init(dist=dist)
    for key in ("scale", "shift"):
        if key in cfg:
            lo, hi = (float(v) for v in cfg[key])
            if not lo <= hi:
                raise ValueError(f"init.{key} must be a range [low, high]")
            init = _replace(init, **{key: (lo, hi)})
    if dist in ("uniform", "randint"):
        if kind == "int" and dist == "randint":
            lo, hi = dtypes.get(dtype).range()
            default = (max(lo, -100), min(hi, 100 if lo < 0 else 200))
        elif kind == "bool":
            default = (0, 1)
        elif dist == "randint":
            default = (-100, 100)
        else:
            default = (-1, 1)
        init = _replace(init, low=Expr(cfg.get("low", default[0])), high=Expr(cfg.get("high", default[1])))
    if dist == "ties":
        levels = cfg.get("levels", Init.levels)
        if isinstance(levels, bool) or not isinstance(levels, int) or not 1 <= levels <= 1 << 20:
            raise ValueError("init.levels must be an integer from 1 to 2**20")
        init = _replace(init, levels=levels)
    if dist == "bernoulli":
        p = float(cfg.get("p", Init.p))
        if not 0.0 <= p <= 1.0:
            raise ValueError("init.p must be in [0, 1]")
        init = _replace(init, p=p)
    return init


def _replace(init: Init, **kw: Any) -> Init:
    return Init(**{**init.__dict__, **kw})


def draw(init: Init, params: np.random.Generator, sizes: Mapping[str, int]) -> Draw:
    """This round's parameters (scale and shift are always drawn, so each argument's draws stay
    in step whatever the others' distributions)."""
    scale, shift = params.uniform(*init.scale), params.uniform(*init.shift)
    if init.dist in ("normal", "ties"):
        return Draw(init.dist, a=scale, b=shift, hi=init.levels - 1)
    if init.dist == "uniform":
        assert init.low is not None and init.high is not None
        return Draw("uniform", a=float(init.low.value(sizes)), b=float(init.high.value(sizes)))
    if init.dist == "randint":
        assert init.low is not None and init.high is not None
        return Draw("randint", lo=init.low.int_value(sizes), hi=init.high.int_value(sizes))
    return Draw(init.dist, p=init.p)


def check_draw(d: Draw, dtype: str, size: int) -> str | None:
    """Why a distribution cannot fill a buffer of this dtype and size, or None."""
    dt = dtypes.get(dtype)
    if d.dist == "randint":
        if d.lo > d.hi or d.hi - d.lo + 1 > MAX_RANGE:
            return f"randint range [{d.lo}, {d.hi}] is empty or wider than 2**62"
        if dt.exact and not dt.range()[0] <= d.lo <= d.hi <= dt.range()[1]:
            return f"randint range [{d.lo}, {d.hi}] does not fit {dtype}"
    if d.dist == "uniform" and not d.a < d.b:
        return f"uniform range [{d.a}, {d.b}) is empty"
    if d.dist == "permutation" and dt.exact and size - 1 > dt.range()[1]:
        return f"a permutation of {size} elements does not fit {dtype}"
    return None


def fill(xp: Any, out: Any, dtype: str, d: Draw, seed: int) -> None:
    """Overwrite ``out`` (storage of ``dtype``) with values of the distribution ``d`` determined
    by ``seed``."""
    seed &= _M64
    if xp is np:
        out.reshape(-1)[...] = dtypes.store(_values(d, out.size, seed), dtype)
        return
    _fill_device(xp, out, dtype, d, seed)


def _feistel_half(n: int) -> int:
    """Half the bits of the smallest even-width power of two that holds 0..n-1 (at least 1)."""
    return max(1, ((max(n - 1, 1)).bit_length() + 1) // 2)


# ---- NumPy ---------------------------------------------------------------------------------
def _mix(z: Any) -> Any:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_MUL1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_MUL2)
    return z ^ (z >> np.uint64(31))


def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * _MUL1) & _M64
    z = ((z ^ (z >> 27)) * _MUL2) & _M64
    return z ^ (z >> 31)


def _unit(z: Any) -> Any:
    """[0, 1) from the top 24 bits, as float32."""
    return (z >> np.uint64(40)).astype(np.float32) * np.float32(1 / 16777216)


def _below(z: Any, r: int) -> Any:
    """An integer in [0, r) from z."""
    if r <= 1 << 32:
        with np.errstate(over="ignore"):
            return ((z >> np.uint64(32)) * np.uint64(r)) >> np.uint64(32)
    return z % np.uint64(r)


def _feistel(x: Any, seed: int, h: int) -> Any:
    mask = np.uint64((1 << h) - 1)
    left, right = x >> np.uint64(h), x & mask
    for k in range(1, 5):
        f = _mix(right ^ np.uint64(_mix_int((seed + k * _GOLDEN) & _M64))) & mask
        left, right = right, left ^ f
    return (left << np.uint64(h)) | right


def _values(d: Draw, n: int, seed: int) -> np.ndarray:
    """float32 values, or int64 for the integer-valued distributions."""
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = _mix(np.uint64(seed) + i * np.uint64(_GOLDEN))
    if d.dist == "normal":
        u1 = ((z >> np.uint64(40)) + np.uint64(1)).astype(np.float32) * np.float32(1 / 16777216)
        u2 = (z & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(1 / 16777216)
        g = np.sqrt(np.float32(-2) * np.log(u1)) * np.cos(np.float32(2 * np.pi) * u2)
        return g * np.float32(d.a) + np.float32(d.b)
    if d.dist == "uniform":
        a, b = np.float32(d.a), np.float32(d.b)
        return a + (b - a) * _unit(z)
    if d.dist == "ties":
        k = _below(z, d.hi + 1).astype(np.float32)
        return np.float32(d.b) + np.float32(d.a) * (k - np.float32(0.5) * np.float32(d.hi))
    if d.dist == "randint":
        return d.lo + _below(z, d.hi - d.lo + 1).astype(np.int64)
    if d.dist == "bernoulli":
        return (_unit(z) < np.float32(d.p)).astype(np.int64)
    h = _feistel_half(n)
    x = _feistel(i, seed, h)
    while (outside := x >= np.uint64(n)).any():
        x[outside] = _feistel(x[outside], seed, h)
    return x.astype(np.int64)


# ---- CUDA ----------------------------------------------------------------------------------
_CUDA_COMMON = r"""
#define GOLDEN 0x9E3779B97F4A7C15ULL
__device__ __forceinline__ unsigned long long evolve_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float evolve_unit(unsigned long long z) {
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}
__device__ __forceinline__ unsigned long long evolve_below(unsigned long long z, unsigned long long r) {
    return r <= 0x100000000ULL ? ((z >> 32) * r) >> 32 : z % r;
}
__device__ __forceinline__ unsigned long long evolve_feistel(unsigned long long x, unsigned long long seed,
                                                             int h) {
    unsigned long long mask = (1ULL << h) - 1ULL, left = x >> h, right = x & mask;
    for (unsigned long long k = 1; k <= 4; ++k) {
        unsigned long long f = evolve_mix(right ^ evolve_mix(seed + k * GOLDEN)) & mask;
        unsigned long long t = left ^ f;
        left = right;
        right = t;
    }
    return (left << h) | right;
}
"""
_CUDA_DIST = {
    "normal": """
        float u1 = (float)((z >> 40) + 1) * (1.0f / 16777216.0f);
        float u2 = (float)(z & 0xFFFFFFULL) * (1.0f / 16777216.0f);
        float v = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * a + b;""",
    "uniform": """
        float v = __fadd_rn(a, __fmul_rn(__fsub_rn(b, a), evolve_unit(z)));""",
    "ties": """
        float k = (float)evolve_below(z, (unsigned long long)hi + 1ULL);
        float v = __fadd_rn(b, __fmul_rn(a, __fsub_rn(k, __fmul_rn(0.5f, (float)hi))));""",
    "randint": """
        long long v = lo + (long long)evolve_below(z, (unsigned long long)(hi - lo) + 1ULL);""",
    "bernoulli": """
        long long v = evolve_unit(z) < p ? 1 : 0;""",
    "permutation": """
        unsigned long long x = evolve_feistel((unsigned long long)i, seed, h);
        while (x >= (unsigned long long)n) x = evolve_feistel(x, seed, h);
        long long v = (long long)x;""",
}
_CTYPE = {"float64": "double", "float32": "float", "float16": "__half", "int8": "signed char",
          "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
          "uint16": "unsigned short", "uint32": "unsigned int"}


def _cuda_store(dtype: str, int_valued: bool) -> str:
    d = dtypes.get(dtype)
    ctype = _CTYPE[d.storage]
    if d.kind == "bool":
        return "out[i] = v != 0 ? 1 : 0;"
    if d.kind == "int":
        if int_valued:
            return f"out[i] = ({ctype})v;"
        lo, hi = d.range()
        return (f"double r = fmin(fmax(rint((double)v), {float(max(lo, -(2**53)))!r}), "
                f"{float(min(hi, 2**53))!r}); out[i] = ({ctype})(long long)r;")
    f32 = "(float)(double)v" if int_valued else "v"
    return {"float64": "out[i] = (double)v;", "float32": f"out[i] = {f32};",
            "float16": f"out[i] = __float2half_rn({f32});"}.get(
        d.name, f"out[i] = evolve_to_{d.name}({f32});")


def cuda_source(dist: str, dtype: str) -> str:
    """The fill kernel for one distribution and dtype: ``evolve_fill(out, n, seed, a, b, lo, hi,
    p, h)``, a grid-stride loop over the buffer."""
    ctype = _CTYPE[dtypes.get(dtype).storage]
    return f"""{dtypes.CUDA_PREAMBLE}{_CUDA_COMMON}
extern "C" __global__ void evolve_fill({ctype}* __restrict__ out, long long n, unsigned long long seed,
                                       float a, float b, long long lo, long long hi, float p, int h) {{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{
        unsigned long long z = evolve_mix(seed + (unsigned long long)i * GOLDEN);
        {_CUDA_DIST[dist].strip()}
        {_cuda_store(dtype, dist in INT_VALUED)}
    }}
}}
"""


_kernels: dict[tuple[str, str, int], Any] = {}


def _fill_device(cp: Any, out: Any, dtype: str, d: Draw, seed: int) -> None:
    device = cp.cuda.Device()
    key = (d.dist, dtype, device.id)
    fn = _kernels.get(key)
    if fn is None:
        from evolve.kernel.compiler import compile_cuda

        module = cp.cuda.function.Module()
        module.load(compile_cuda(cuda_source(d.dist, dtype), {}, f"sm_{device.compute_capability}").cubin)
        fn = _kernels[key] = (module, module.get_function("evolve_fill"))
    n = out.size
    if n == 0:
        return
    blocks = min((n + 255) // 256, 8192)
    fn[1]((blocks, 1, 1), (256, 1, 1), (out, np.int64(n), np.uint64(seed), np.float32(d.a), np.float32(d.b),
                                        np.int64(d.lo), np.int64(d.hi), np.float32(d.p),
                                        np.int32(_feistel_half(n))))
