"""NVRTC through ctypes, for a machine without CuPy (``pip install -e ".[check]"``).

``backend=check`` and a proposer's prompts need NVRTC, not a GPU; CuPy's wheels with the CUDA
toolkit are about 2 GB. This module offers the few calls :mod:`evolve.kernel.compiler` makes, with CuPy's
names and types, over the ``libnvrtc`` of the ``nvidia-cuda-nvrtc`` wheel (found by
``cuda-pathfinder``, as CuPy finds it).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence


class NVRTCError(RuntimeError):
    """An NVRTC call returned an error (a compile error: the program's log says why)."""


@functools.cache
def _lib() -> ctypes.CDLL:
    from cuda.pathfinder import load_nvidia_dynamic_lib

    lib = ctypes.CDLL(load_nvidia_dynamic_lib("nvrtc").abs_path)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def _call(name: str, *args: object) -> None:
    lib = _lib()
    if code := getattr(lib, name)(*args):
        raise NVRTCError(f"{name}: {lib.nvrtcGetErrorString(code).decode(errors='replace')} ({code})")


def _strings(items: Sequence[str]) -> ctypes.Array[ctypes.c_char_p]:
    return (ctypes.c_char_p * len(items))(*(s.encode() for s in items))


def getVersion() -> tuple[int, int]:  # CuPy's names and types
    major, minor = ctypes.c_int(), ctypes.c_int()
    _call("nvrtcVersion", ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def createProgram(source: str, name: str, headers: Sequence[str],
                  include_names: Sequence[str]) -> int:
    prog = ctypes.c_void_p()
    _call("nvrtcCreateProgram", ctypes.byref(prog), source.encode(), name.encode(), len(headers),
          _strings(headers), _strings(include_names))
    return int(prog.value or 0)


def compileProgram(prog: int, options: Sequence[str]) -> None:
    _call("nvrtcCompileProgram", ctypes.c_void_p(prog), len(options), _strings(options))


def _read(prog: int, what: str) -> bytes:
    size = ctypes.c_size_t()
    _call(f"nvrtcGet{what}Size", ctypes.c_void_p(prog), ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    _call(f"nvrtcGet{what}", ctypes.c_void_p(prog), buf)
    return buf.raw


def getProgramLog(prog: int) -> str:
    return _read(prog, "ProgramLog").rstrip(b"\0").decode(errors="replace")


def getCUBIN(prog: int) -> bytes:
    return _read(prog, "CUBIN")


def getPTX(prog: int) -> bytes:
    return _read(prog, "PTX")


def destroyProgram(prog: int) -> None:
    _call("nvrtcDestroyProgram", ctypes.byref(ctypes.c_void_p(prog)))
