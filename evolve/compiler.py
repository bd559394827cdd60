"""Compiling variants with NVRTC, with an include allow-list and a cubin cache.

NVRTC needs no GPU, so this runs anywhere the ``nvidia-cuda-nvrtc`` and CuPy wheels are
installed: the worker on the GPU machine and the CPU test suite compile the same way. Generated
sources are data: they go to NVRTC and nowhere else, and may include only CUDA's own headers.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evolve.errors import EvolveError
from evolve.spec import normalize_source

ALLOWED_INCLUDES = frozenset({
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_runtime.h", "cuda/std/cstdint",
    "cooperative_groups.h", "cooperative_groups/reduce.h", "cooperative_groups/memcpy_async.h",
    "cuda_pipeline.h", "cuda/pipeline", "cuda/barrier", "math_constants.h",
    "stdint.h", "cstdint", "float.h", "cfloat", "limits.h", "climits",
})
CACHE_VERSION = "2"
CACHE_DIR = Path(os.environ.get("EVOLVE_CACHE_DIR", Path.home() / ".cache" / "cuda-evolve")) / "cubin"

# Preprocessor directives after line splicing; "%:" is the digraph for "#".
_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(\w+)(.*)$", re.M)
_INCLUDE = re.compile(r'^\s*<([A-Za-z0-9_./]+)>\s*(?://.*|/\*.*\*/\s*)?$')
_PRINTF = re.compile(r"\bv?printf\b")
_STACK = re.compile(r"(\d+) bytes stack frame")
_PTXAS_INFO = re.compile(r"ptxas (info|\s+\.)")  # the resource report, not warnings or errors
MAX_LOCAL_BYTES = 16 * 1024  # per-thread local memory (stack frame) a candidate may use
_PATHS = re.compile(r"(?:/[\w.+-]+)+/([\w.+-]+\.(?:cu|h|hpp|cuh))")


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    log: str
    seconds: float
    cached: bool


class CompileError(Exception):
    """NVRTC refused the source; the message is the sanitized compiler log."""


class SourceRejected(CompileError):
    """The source or the code it compiles to uses something candidates may not use."""


# Device-side calls a candidate may not make, found in the cubin whatever the source did to hide
# them (token pasting, macros): printf floods the host, malloc drains a heap shared by candidates.
_FORBIDDEN_SYMBOLS = {b"\x00vprintf\x00": "printf", b"\x00malloc\x00": "malloc",
                      b"\x00free\x00": "free"}


def check_source(source: str) -> str | None:
    """Why the source may not be compiled (a forbidden include or device printf), or None."""
    spliced = source.replace("\\\r\n", "").replace("\\\n", "")
    for m in _DIRECTIVE.finditer(spliced):
        directive, rest = m.group(1), m.group(2)
        if directive in ("include", "include_next", "import", "embed"):
            inc = _INCLUDE.match(rest)
            if directive != "include" or not inc or inc.group(1) not in ALLOWED_INCLUDES:
                return f"#{directive}{rest.rstrip()} is not allowed (only CUDA headers: " \
                       f"{', '.join(sorted(ALLOWED_INCLUDES))})"
    if "__has_include" in spliced:
        return "__has_include is not allowed"
    if _PRINTF.search(normalize_source(spliced)):
        return "printf is not allowed in device code (its output would flood the host)"
    return None


def options(defines: Mapping[str, object], arch: str) -> list[str]:
    return ["--std=c++17", f"-arch={arch}", "-lineinfo", "--ptxas-options=-v",
            *(f"-I{d}" for d in _cuda_include_dirs()),
            *(f"-D{k}={v}" for k, v in sorted(defines.items()))]


@functools.cache
def _cuda_include_dirs() -> tuple[str, ...]:
    """CUDA's own headers (cuda_fp16.h, ...), which NVRTC does not find by itself."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
    except Exception:
        found = None
    return (found,) if found else ()


def sanitize(log: str) -> str:
    """Compiler output without host paths; only the file's own name is kept."""
    return _PATHS.sub(r"\1", log).strip()


def first_error(log: str) -> str:
    """The line of a compiler log a human reads first."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln), lines[0] if lines else "compile error")[:300]


def nvrtc_version() -> tuple[int, int]:
    return tuple(_nvrtc().getVersion())  # type: ignore[return-value]


def compile_cuda(source: str, defines: Mapping[str, object], arch: str,
                 cache: bool = True) -> Compiled:
    """Compile to a cubin for ``arch`` (e.g. sm_90); raise CompileError with the log."""
    reason = check_source(source)
    if reason:
        raise SourceRejected(reason)
    nvrtc = _nvrtc()
    opts = options(defines, arch)
    # only cubins that passed every check below are cached; the version retires older entries
    parts = [source, *opts, repr(nvrtc.getVersion()), CACHE_VERSION]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    path = CACHE_DIR / f"{key}.cubin"
    if cache and path.is_file():
        return Compiled(path.read_bytes(), "", 0.0, True)
    t0 = time.perf_counter()
    prog = nvrtc.createProgram(source, "kernel.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            raise CompileError(sanitize(nvrtc.getProgramLog(prog)) or "NVRTC failed") from None
        verbose = sanitize(nvrtc.getProgramLog(prog)).replace("\x00", "")
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    stack = max((int(n) for n in _STACK.findall(verbose)), default=0)
    if stack > MAX_LOCAL_BYTES:
        raise SourceRejected(f"uses {stack} bytes of local memory (stack frame) per thread; "
                             f"the limit is {MAX_LOCAL_BYTES}")
    log = "\n".join(ln for ln in verbose.splitlines() if not _PTXAS_INFO.match(ln)).strip()
    for symbol, name in _FORBIDDEN_SYMBOLS.items():
        if symbol in cubin:
            raise SourceRejected(f"device {name} is not allowed (found in the compiled code)")
    if "cannot be statically determined" in verbose:
        raise SourceRejected(f"unbounded stack (recursion?) is not allowed: {first_error(log)}")
    seconds = time.perf_counter() - t0
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(cubin)
        tmp.replace(path)
    return Compiled(cubin, log, seconds, False)


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as exc:
        raise EvolveError(
            f"NVRTC is not available ({exc.__class__.__name__}): install cuda-evolve[cuda13] "
            "(or [cuda12]) and nvidia-cuda-nvrtc"
        ) from None
    return nvrtc
