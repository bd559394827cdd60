"""Secret-seeded input values, written straight into buffers on the host (NumPy) or the GPU (CuPy).

A counter-based generator: element i of a buffer is a function of (seed, i) alone. The evaluator
writes fresh inputs into a candidate's buffers before every timed call and makes the same values
again after it, to check that nothing changed and to compute the reference. No generator state
lives in device memory, where a kernel could read or rewind it, and no copy of the inputs exists
while the kernel runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_GOLDEN = 0x9E3779B97F4A7C15
_MUL1, _MUL2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's finalizer

_NORMAL_CUDA = """
unsigned long long z = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ULL;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
z ^= z >> 31;
float u1 = (float)((z >> 40) + 1) * (1.0f / 16777216.0f);
float u2 = (float)(z & 0xFFFFFFULL) * (1.0f / 16777216.0f);
out = (T)(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * scale + shift);
"""
_kernels: dict[str, Any] = {}


def fill_normal(xp: Any, out: Any, seed: int, scale: float, shift: float) -> None:
    """Overwrite ``out`` with normal(0, 1) * scale + shift values determined by ``seed``."""
    seed &= (1 << 64) - 1
    if xp is np:
        i = np.arange(out.size, dtype=np.uint64)
        with np.errstate(over="ignore"):
            z = np.uint64(seed) + i * np.uint64(_GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(_MUL1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(_MUL2)
        z ^= z >> np.uint64(31)
        u1 = ((z >> np.uint64(40)) + np.uint64(1)).astype(np.float32) * np.float32(1 / 16777216)
        u2 = (z & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(1 / 16777216)
        n = np.sqrt(np.float32(-2) * np.log(u1)) * np.cos(np.float32(2 * np.pi) * u2)
        out.reshape(-1)[...] = (n * np.float32(scale) + np.float32(shift)).astype(out.dtype)
        return
    kernel = _kernels.get("normal")
    if kernel is None:
        kernel = _kernels["normal"] = xp.ElementwiseKernel(
            "uint64 seed, float32 scale, float32 shift", "T out", _NORMAL_CUDA, "evolve_fill_normal")
    kernel(np.uint64(seed), np.float32(scale), np.float32(shift), out.reshape(-1))
