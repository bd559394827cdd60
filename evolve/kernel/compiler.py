"""Compiling variants with NVRTC, with an include allow-list and a cubin cache.

NVRTC needs no GPU, so this runs anywhere the ``nvidia-cuda-nvrtc`` wheel is installed (with
CuPy, or alone: :mod:`evolve.kernel.nvrtc`): the worker on the GPU machine and the CPU test suite compile
the same way. Generated
sources are data: they go to NVRTC and nowhere else, and may include only CUDA's own headers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evolve.errors import EvolveError
from evolve.kernel.cubin import CubinError, inspect
from evolve.kernel.spec import COMMENT_OR_STRING, MAX_SOURCE_CHARS, normalize_source
from evolve.paths import install_command

PROGRAM_NAME = "kernel.cu"  # what NVRTC calls every source (__FILE__; best.cu's #line names it too)

ALLOWED_INCLUDES = frozenset({
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_runtime.h", "mma.h", "math_constants.h",
    "cooperative_groups.h", "cooperative_groups/reduce.h", "cooperative_groups/memcpy_async.h",
    "cuda_pipeline.h", "cuda/pipeline", "cuda/barrier", "cuda/ptx",  # libcu++ (CCCL): mbarriers, PTX wrappers
    "cuda/std/cstdint", "cuda/std/limits", "cuda/std/type_traits",
    "stdint.h", "cstdint", "float.h", "cfloat", "limits.h", "climits",
})
CACHE_VERSION = "4"
CACHE_DIR = Path(os.environ.get("EVOLVE_CACHE_DIR", Path.home() / ".cache" / "cuda-evolve")) / "cubin"
MAX_CACHE_BYTES = 2 << 30  # the cubin cache keeps the most recently used entries under this

# Preprocessor directives after line splicing; "%:" is the digraph for "#".
_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(\w+)(.*)$", re.M)
_INCLUDE = re.compile(r'^\s*<([A-Za-z0-9_./]+)>\s*(?://.*|/\*.*\*/\s*)?$')
_PRINTF = re.compile(r"\bv?printf\b")
# What makes a kernel depend on when or where it was built: refused in the source (token pasting
# could build these names unseen, so ## is refused where the source's identifiers can spell one)
BUILD_MACROS = ("__DATE__", "__TIME__", "__TIMESTAMP__", "__FILE__", "__BASE_FILE__", "__FILE_NAME__")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# ... and on when it runs: reads of the clocks, in the PTX (whatever the source spelled: inline
# asm split over string literals, clock64(), a header's code), before ptxas sees it
_CLOCK_READ = re.compile(r"%(globaltimer(?:_lo|_hi)?|clock(?:_hi|64)?)\b")
_STACK = re.compile(r"(\d+) bytes stack frame")
_PTXAS_INFO = re.compile(r"ptxas (info|\s+\.)")  # the resource report, not warnings or errors
MAX_LOCAL_BYTES = 16 * 1024  # per-thread local memory (stack frame) a candidate may use
# A module's own __device__ memory outlives a launch: a cache of earlier inputs or results, or a
# request that exhausts the GPU when the module loads. Kernels that need state declare scratch.
MAX_MODULE_GLOBAL_BYTES = 64 * 1024
MAX_CUBIN_BYTES = 8 << 20  # seeds compile to < 200 KiB; a huge one is an initializer bomb
MAX_LOG_CHARS = 64 * 1024  # compiler output kept (and parsed) per compile
# One run of path characters: linear to scan, whatever the compiler prints.
_PATH = re.compile(r"/[\w.+/-]+")
_SOURCE_FILE = re.compile(r"[\w.+-]+\.(?:cu|h|hpp|cuh)")


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


# The only function a module may call without defining it: assert's, which ends the launch with
# an error. Every other undefined function is a driver system call (printf floods the host; the
# device heap is shared by candidates; device-side launches escape the spec's grid and block
# checks), found in the cubin whatever the source did to hide it (token pasting, macros, aliases).
ALLOWED_SYSCALLS = frozenset({"__assertfail"})
_SYSCALL_NAMES = {"vprintf": "device printf", "malloc": "device malloc", "free": "device malloc",
                  "__cuda_syscall_aligned_malloc": "device malloc"}


def check_source(source: str) -> str | None:
    """Why the source may not be compiled (a forbidden include or device printf), or None."""
    if len(source) > MAX_SOURCE_CHARS:
        return f"the source is longer than {MAX_SOURCE_CHARS} characters"
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
    return _build_identity(spliced)


def _build_identity(spliced: str) -> str | None:
    """Why the code could depend on when or where it was built: a build macro in it, or token
    pasting with identifiers that can spell one; None if neither."""
    code = COMMENT_OR_STRING.sub(" ", spliced)
    tokens = set(_IDENT.findall(code))
    for name in BUILD_MACROS:
        if name in tokens:
            return (f"{name} is not allowed: it makes the kernel depend on when or where it was built "
                    "(the judged code and the user's build would differ)")
    if "##" in code or "%:%:" in code:
        for name in BUILD_MACROS:
            if _spells(name, tokens):
                return (f"token pasting (##) with identifiers that can spell {name} is not allowed: "
                        "it makes the kernel depend on when or where it was built")
    return None


def _spells(name: str, tokens: set[str]) -> bool:
    """Whether ``name`` is a concatenation of two or more of ``tokens``."""
    reach = {0: 0}  # end of a prefix spelled so far -> the fewest pieces it took
    for i in range(len(name)):
        if i in reach:
            for j in range(i + 1, len(name) + 1):
                if name[i:j] in tokens:
                    reach[j] = min(reach.get(j, 99), reach[i] + 1)
    return reach.get(len(name), 0) >= 2


def target_arch(arch: str, arch_specific: bool) -> str:
    """The -arch a variant compiles for on a GPU of ``arch`` (sm_90): the arch-specific target
    (sm_90a) where its spec asks for one. Its instructions (wgmma, setmaxnreg, ...) exist on that
    architecture alone, so the cubin runs there and nowhere else; the cubin cache keys on the
    target, as on every compile option. CompileError where the GPU has no such target (before
    Hopper)."""
    if not arch_specific:
        return arch
    digits = arch.removeprefix("sm_")
    if not digits.isdigit() or int(digits) < 90:
        raise CompileError(f"arch_specific: true needs a GPU with an arch-specific target (sm_90a, on "
                           f"Hopper, and newer); this one is {arch}")
    return f"{arch}a"


def options(defines: Mapping[str, object], arch: str) -> list[str]:
    return ["--std=c++17", f"-arch={arch}", "-lineinfo", "--ptxas-options=-v",
            *(f"-I{d}" for d in _cuda_include_dirs()),
            *(f"-D{k}={v}" for k, v in sorted(defines.items()))]


@functools.cache
def _cuda_include_dirs() -> tuple[str, ...]:
    """CUDA's own headers (cuda_fp16.h, ...), libcu++'s (CCCL: cuda/barrier, cuda/ptx) and the
    compiler's (``crt/``, which mma.h includes: the runtime's pip wheel lacks them), which NVRTC
    does not find by itself; any may be missing (then so are its headers)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        return ()
    found = []
    for lib in ("cudart", "cccl", "nvcc"):
        try:
            if (path := find_nvidia_header_directory(lib)) and path not in found:
                found.append(path)
        except Exception:  # an unknown library name in an older pathfinder, a broken install
            continue
    return tuple(found)


def sanitize(log: str) -> str:
    """Compiler output without host paths (only a source file's own name is kept), cut to a bound."""

    def strip(m: re.Match[str]) -> str:
        path = m.group(0)
        head, _, name = path.rpartition("/")
        return name if head and _SOURCE_FILE.fullmatch(name) else path

    return _PATH.sub(strip, log[:MAX_LOG_CHARS]).strip()


def first_error(log: str) -> str:
    """The line of a compiler log a human reads first."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln), lines[0] if lines else "compile error")[:300]


def nvrtc_version() -> tuple[int, int]:
    return tuple(_nvrtc().getVersion())  # type: ignore[return-value]


def load_compiler() -> None:
    """Do once what a process's first compile does before compiling: load NVRTC and find CUDA's
    header directories (cuda-pathfinder asks a Python subprocess), so a compile's time limit
    measures the compile alone. EvolveError where NVRTC is missing."""
    nvrtc_version()
    _cuda_include_dirs()


def available_includes(arch: str) -> tuple[str, ...]:
    """The allowed headers this NVRTC can really compile, for prompts: a header the allow-list
    admits may still be missing where NVRTC has no system headers (stdint.h on the GPU machine).
    Probed once per NVRTC version, include directories and arch, then read from the cache."""
    nvrtc = _nvrtc()
    key = hashlib.sha256(repr((sorted(ALLOWED_INCLUDES), _cuda_include_dirs(), nvrtc.getVersion(),
                               arch)).encode()).hexdigest()[:16]
    path = CACHE_DIR.parent / f"includes-{key}.json"
    with contextlib.suppress(OSError, ValueError):
        return tuple(json.loads(path.read_text()))
    found = []
    for header in sorted(ALLOWED_INCLUDES):
        prog = nvrtc.createProgram(f"#include <{header}>\nextern \"C\" __global__ void probe() {{}}\n",
                                   "probe.cu", [], [])
        try:
            nvrtc.compileProgram(prog, options({}, arch))
            found.append(header)
        except nvrtc.NVRTCError:
            pass
        finally:
            nvrtc.destroyProgram(prog)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(found))
    return tuple(found)


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
        with contextlib.suppress(OSError):  # evicted meanwhile: compile it again
            cubin = path.read_bytes()
            os.utime(path)  # recently used: kept by the eviction
            return Compiled(cubin, "", 0.0, True)
    t0 = time.perf_counter()
    prog = nvrtc.createProgram(source, PROGRAM_NAME, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            raise CompileError(sanitize(nvrtc.getProgramLog(prog)) or "NVRTC failed") from None
        verbose = sanitize(nvrtc.getProgramLog(prog)).replace("\x00", "")
        cubin = nvrtc.getCUBIN(prog)
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    log = "\n".join(ln for ln in verbose.splitlines() if not _PTXAS_INFO.match(ln)).strip()
    if clock := _CLOCK_READ.search(ptx.decode(errors="replace") if isinstance(ptx, bytes) else str(ptx)):
        raise SourceRejected(f"reading the clock (%{clock.group(1)} in the PTX: clock(), clock64(), "
                             "%globaltimer) is not allowed: a kernel must not depend on when it runs")
    _check_compiled(cubin, verbose, log)
    seconds = time.perf_counter() - t0
    if cache:
        _store(path, cubin)
    return Compiled(cubin, log, seconds, False)


def _check_compiled(cubin: bytes, verbose: str, log: str) -> None:
    """Refuse what the compiled module would do that a candidate may not (SourceRejected)."""
    if len(cubin) > MAX_CUBIN_BYTES:
        raise SourceRejected(f"compiles to {len(cubin)} bytes of code and data; "
                             f"the limit is {MAX_CUBIN_BYTES}")
    stack = max((int(n) for n in _STACK.findall(verbose)), default=0)
    if stack > MAX_LOCAL_BYTES:
        raise SourceRejected(f"uses {stack} bytes of local memory (stack frame) per thread; "
                             f"the limit is {MAX_LOCAL_BYTES}")
    if "cannot be statically determined" in verbose:
        raise SourceRejected(f"unbounded stack (recursion?) is not allowed: {first_error(log)}")
    try:
        info = inspect(cubin)
    except CubinError as exc:
        raise SourceRejected(f"the compiled module cannot be checked: {exc}") from None
    for name in sorted(info.undefined - ALLOWED_SYSCALLS):
        what = _SYSCALL_NAMES.get(name, "a driver system call")
        raise SourceRejected(f"{what} is not allowed (the compiled code calls {name}; "
                             "a kernel may call only functions it defines)")
    if info.global_bytes > MAX_MODULE_GLOBAL_BYTES:
        raise SourceRejected(
            f"declares {info.global_bytes} bytes of __device__ memory; "
            f"the limit is {MAX_MODULE_GLOBAL_BYTES} "
            "(state that outlives a launch belongs in a scratch buffer of the launch spec)")


def _store(path: Path, cubin: bytes) -> None:
    """Write one cache entry atomically, then drop the least recently used ones over the cap."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(cubin)
    tmp.replace(path)
    entries = []
    for p in path.parent.glob("*.cubin"):
        with contextlib.suppress(OSError):  # another process may evict it at the same time
            st = p.stat()
            entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries):
        if total <= MAX_CACHE_BYTES:
            break
        with contextlib.suppress(OSError):
            p.unlink()
        total -= size


def _nvrtc():
    """CuPy's NVRTC bindings, or (no CuPy: the ``check`` extra) the same calls through ctypes."""
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
        return nvrtc
    except Exception as exc:
        cupy_error = exc
    try:
        from evolve.kernel import nvrtc as own

        own.getVersion()
        return own
    except Exception as exc:
        why = sorted({cupy_error.__class__.__name__, exc.__class__.__name__})
        raise EvolveError(
            f"NVRTC is not available ({', '.join(why)}): {install_command('check')} (NVRTC alone, "
            f"enough for backend=check), or {install_command('cuda13')} (or cuda12) for a GPU"
        ) from None
