"""What a kernel's parameters point to, read from its source, against the task's dtypes.

A cubin records each parameter's size, not its type: a kernel declaring ``float*`` for a
bfloat16 argument compiles, launches and computes garbage, so every trial of it fails as wrong.
``backend=check`` reads the ``extern "C" __global__`` signature instead and names the mismatch.
Only types it knows are judged (a template parameter or an unknown typedef is left alone); a
bit-stored format (bfloat16, fp8) may also be read as unsigned integers of its width, and
``void*`` holds anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from evolve import dtypes

# pointee type -> the dtype family it holds (a vector type: its element's)
_FLOATS = {"float32": ("float", "float2", "float4"), "float64": ("double", "double2"),
           "float16": ("__half", "half", "__half2", "half2"),
           "bfloat16": ("__nv_bfloat16", "nv_bfloat16", "__nv_bfloat162", "nv_bfloat162"),
           "float8_e4m3fn": ("__nv_fp8_e4m3",), "float8_e5m2": ("__nv_fp8_e5m2",)}
_INTS = {1: ("char", "signed char", "unsigned char", "int8_t", "uint8_t", "char4", "uchar4"),
         2: ("short", "unsigned short", "int16_t", "uint16_t", "ushort", "short2", "ushort2"),
         4: ("int", "unsigned", "unsigned int", "int32_t", "uint32_t", "int2", "int4", "uint2", "uint4"),
         8: ("long long", "unsigned long long", "int64_t", "uint64_t", "longlong2", "ulonglong2")}
KNOWN = {t: name for name, ts in _FLOATS.items() for t in ts} | {
    t: f"int{8 * size}" for size, ts in _INTS.items() for t in ts} | {"bool": "bool", "void": "void"}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|__grid_constant__)\b")


def pointees(source: str, kernel: str, defines: Mapping[str, object]) -> list[str | None] | None:
    """The base type each parameter of ``kernel`` points to (None: not a pointer), macros from
    ``defines`` substituted; None when the signature is not found."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    m = re.search(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+'
                  rf"(?:__launch_bounds__\s*\([^)]*\)\s*)?{re.escape(kernel)}\s*\(", text)
    if m is None:
        return None
    depth, start, params = 0, m.end(), []
    for i in range(m.end(), len(text)):
        if text[i] in "(<":
            depth += 1
        elif text[i] in ")>" and depth:
            depth -= 1
        elif text[i] == ")" or (text[i] == "," and not depth):
            params.append(text[start:i])
            start = i + 1
            if text[i] == ")":
                break
    out: list[str | None] = []
    for p in params:
        if "*" not in p:
            out.append(None)
            continue
        base = " ".join(_QUALIFIERS.sub(" ", p.split("*", 1)[0]).split())
        out.append(str(defines.get(base, base)))
    return out


def mismatch(dtype: str, pointee: str) -> bool:
    """Whether a pointer to ``pointee`` clearly cannot be an array of ``dtype``."""
    family = KNOWN.get(pointee)
    if family is None or family == "void":
        return False
    d = dtypes.get(dtype)
    if d.kind == "float":
        return family != dtype and not (d.bits and family == f"int{8 * d.itemsize}")
    return family != f"int{8 * d.itemsize}" and not (d.kind == "bool" and family == "bool")


def wrong_types(source: str, kernel: str, args: Sequence[str], arg_dtypes: Mapping[str, str],
                defines: Mapping[str, object]) -> str:
    """The first parameter whose pointee contradicts its task argument's dtype, in words; ""."""
    types = pointees(source, kernel, defines)
    for i, (name, pointee) in enumerate(zip(args, types or [], strict=False)):
        if pointee is not None and name in arg_dtypes and mismatch(arg_dtypes[name], pointee):
            return (f"kernel {kernel}'s parameter {i + 1} ({name}) points to {pointee}, but {name} is "
                    f"{arg_dtypes[name]} ({dtypes.get(arg_dtypes[name]).ctype})")
    return ""
