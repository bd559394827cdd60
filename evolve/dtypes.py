"""Argument dtypes: how each is stored, read by the reference, made from generated values,
marked as unwritten and compared.

Storage is the same on the host (NumPy) and on the GPU (CuPy), so one piece of code judges both:
formats that NumPy or CuPy lack are held as raw bits of their width (bfloat16 as uint16, fp8 as
uint8; a kernel sees ``__nv_bfloat16*`` or ``__nv_fp8_e4m3*`` over the same bytes), and bool as
uint8, so that an unwritten-element sentinel can be neither 0 nor 1. The reference reads every
input widened to float64; the fp8 formats are decoded through ``ml_dtypes``' tables. Floats are
compared within a tolerance (a default per format, from its rounding unit), integers and bool
exactly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

# A float32 value -> the bits of a narrower float, by integer arithmetic that NumPy and CUDA
# perform alike: bfloat16 rounds to nearest even; fp8 truncates toward zero and saturates at the
# largest finite value (inputs only need to be exactly representable, not best rounded).
_CUDA_ENCODERS = r"""
__device__ __forceinline__ unsigned short evolve_to_bfloat16(float f) {
    unsigned int u = __float_as_uint(f);
    return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ unsigned char evolve_to_float8_e4m3fn(float f) {
    unsigned int u = __float_as_uint(f), s = (u >> 24) & 0x80u, m = u & 0x7FFFFFu, code;
    int e = (int)((u >> 23) & 0xFFu) - 127;
    if (e > 8) code = 0x7Eu;
    else if (e >= -6) { code = ((unsigned int)(e + 7) << 3) | (m >> 20); if (code > 0x7Eu) code = 0x7Eu; }
    else if (e >= -9) code = (0x800000u | m) >> (14 - e);
    else code = 0u;
    return (unsigned char)(s | code);
}
__device__ __forceinline__ unsigned char evolve_to_float8_e5m2(float f) {
    unsigned int u = __float_as_uint(f), s = (u >> 24) & 0x80u, m = u & 0x7FFFFFu, code;
    int e = (int)((u >> 23) & 0xFFu) - 127;
    if (e > 15) code = 0x7Bu;
    else if (e >= -14) code = ((unsigned int)(e + 15) << 2) | (m >> 21);
    else if (e >= -16) code = (0x800000u | m) >> (7 - e);
    else code = 0u;
    return (unsigned char)(s | code);
}
"""
CUDA_PREAMBLE = "#include <cuda_fp16.h>\n" + _CUDA_ENCODERS


@dataclass(frozen=True)
class Tol:
    """A dtype's default tolerance (see :class:`evolve.task.task.Tolerance`)."""

    atol: float
    rtol: float
    l2: float


@dataclass(frozen=True)
class DType:
    name: str  # as tasks and launch specs name it (also PyTorch's name for it)
    kind: str  # "float", "int" or "bool"
    storage: str  # NumPy/CuPy dtype of the arrays that hold it
    ctype: str  # what a kernel's parameter points to
    tolerance: Tol | None = None  # floats: default tolerance; None: compared exactly
    nan_bits: int | None = None  # bit-stored floats: the NaN that marks an unwritten element

    @property
    def exact(self) -> bool:
        return self.kind != "float"

    @property
    def itemsize(self) -> int:
        return np.dtype(self.storage).itemsize

    @property
    def bits(self) -> bool:
        """Held as raw bits (no NumPy/CuPy arithmetic type of its own)."""
        return self.kind == "float" and np.dtype(self.storage).kind == "u"

    def range(self) -> tuple[int, int]:
        """The values an exact dtype holds."""
        if self.kind == "bool":
            return 0, 1
        info = np.iinfo(self.storage)
        return int(info.min), int(info.max)


def _float(name: str, storage: str, ctype: str, tol: tuple[float, float, float],
           nan_bits: int | None = None) -> DType:
    return DType(name, "float", storage, ctype, Tol(*tol), nan_bits)


def _int(name: str, ctype: str) -> DType:
    return DType(name, "int", name, ctype)


# Float tolerances: atol (times max|ref|) and rtol of two rounding units u of the format, a
# relative L2 of one u (fp32 and fp64: what a different summation order costs, not u itself).
DTYPES: dict[str, DType] = {d.name: d for d in (
    _float("float64", "float64", "double", (1e-11, 1e-9, 1e-11)),
    _float("float32", "float32", "float", (1e-5, 1e-4, 1e-5)),
    _float("float16", "float16", "__half", (2.0**-10, 2.0**-10, 2.0**-11)),
    _float("bfloat16", "uint16", "__nv_bfloat16", (2.0**-7, 2.0**-7, 2.0**-8), nan_bits=0x7FC0),
    _float("float8_e4m3fn", "uint8", "__nv_fp8_e4m3", (2.0**-3, 2.0**-3, 2.0**-4), nan_bits=0x7F),
    _float("float8_e5m2", "uint8", "__nv_fp8_e5m2", (2.0**-2, 2.0**-2, 2.0**-3), nan_bits=0x7F),
    _int("int8", "int8_t"), _int("int16", "int16_t"), _int("int32", "int"), _int("int64", "long long"),
    _int("uint8", "uint8_t"), _int("uint16", "uint16_t"), _int("uint32", "unsigned int"),
    DType("bool", "bool", "uint8", "bool"),
)}
ITEMSIZE = {name: d.itemsize for name, d in DTYPES.items()}


def get(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; one of {', '.join(DTYPES)}") from None


def of_array(arr: Any) -> DType:
    """The dtype an array of native storage holds (float32, int32, ...)."""
    return get(str(arr.dtype))


def storage(name: str) -> np.dtype:
    return np.dtype(get(name).storage)


# ---- reading: storage -> float64 ---------------------------------------------------------------
@functools.cache
def _table(name: str) -> np.ndarray:
    """Every fp8 code's value as float64 (256 entries), from ml_dtypes."""
    import ml_dtypes

    return np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float64)


_device_tables: dict[str, Any] = {}


def widen(xp: Any, arr: Any, name: str) -> Any:
    """The values of an array as float64 (NaN where a bit-stored float holds NaN)."""
    d = get(name)
    if d.name == "bfloat16":
        return (arr.astype(xp.uint32) << 16).view(xp.float32).astype(xp.float64)
    if d.bits:
        if xp is np:
            return _table(d.name)[arr]
        table = _device_tables.get(d.name)
        if table is None:
            table = _device_tables[d.name] = xp.asarray(_table(d.name))
        return table[arr]
    return arr.astype(xp.float64)


# ---- writing: float32 or int64 values -> storage (host; CUDA_PREAMBLE does it on the GPU) ------
def store(values: np.ndarray, name: str) -> np.ndarray:
    """Generated values (float32, or int64 for the integer-valued distributions) in ``name``'s
    storage: floats rounded as CUDA_PREAMBLE and the fill kernel do it, integers rounded to
    nearest even and clipped to the dtype's range, bool as value != 0."""
    d = get(name)
    if d.kind == "bool":
        return (values != 0).astype(np.uint8)
    if d.kind == "int":
        if values.dtype.kind == "f":
            lo, hi = d.range()
            values = np.clip(np.rint(values.astype(np.float64)), max(lo, -(2**53)), min(hi, 2**53))
            values = values.astype(np.int64)
        return values.astype(d.storage)
    if values.dtype.kind != "f":  # integer-valued distribution into a float dtype
        values = values.astype(np.float64)
        if d.name == "float64":
            return values
    f = values.astype(np.float32)
    if not d.bits:
        return f.astype(d.storage)
    u = f.view(np.uint32).astype(np.int64)
    if d.name == "bfloat16":
        return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)
    return _to_float8(u, *((8, -6, -9, 3, 0x7E, 7, 14) if d.name == "float8_e4m3fn" else
                           (15, -14, -16, 2, 0x7B, 15, 7)))


def _to_float8(u: np.ndarray, emax: int, emin: int, esub: int, mbits: int, top: int, bias: int,
               shift: int) -> np.ndarray:
    """The truncating fp8 encoder of CUDA_PREAMBLE, on NumPy (u: float32 bits as int64)."""
    s, m = (u >> 24) & 0x80, u & 0x7FFFFF
    e = ((u >> 23) & 0xFF) - 127
    normal = np.minimum(((e + bias) << mbits) | (m >> (23 - mbits)), top)
    sub = (0x800000 | m) >> np.clip(shift - e, 0, 63)
    code = np.where(e > emax, top, np.where(e >= emin, normal, np.where(e >= esub, sub, 0)))
    return (s | code).astype(np.uint8)


def unwritten(name: str, rng: np.random.Generator) -> float | int:
    """What an output holds before a launch, as its storage holds it: NaN for floats (NaN's bits
    for bit-stored ones), for integers a value drawn from ``rng`` (a kernel cannot count on a
    fixed one happening to be right), for bool a byte that is neither 0 nor 1."""
    d = get(name)
    if d.kind == "float":
        return float("nan") if d.nan_bits is None else d.nan_bits
    if d.kind == "bool":
        return int(rng.integers(2, 255, endpoint=True))
    lo, hi = d.range()
    return int(rng.integers(lo, hi, endpoint=True))
