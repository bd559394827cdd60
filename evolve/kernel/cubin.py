"""What a compiled module really contains, read from its cubin (an ELF file) before it is loaded.

A candidate declares its kernels and their arguments in the launch spec; the code may differ. The
cubin says what NVRTC and ptxas made of it: the functions it calls without defining them (driver
system calls: device heap, device-side launches, printf), the size of its own ``__device__`` memory
(``.nv.global`` and ``.nv.global.init``, which live as long as the module and can carry state from
one launch to the next), and each kernel's parameter layout (``EIATTR_KPARAM_INFO`` records of its
``.nv.info.<kernel>`` section), which the driver copies from host memory at every launch. Pure
parsing with bounds on every offset: it runs on any machine and refuses what it cannot read.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB, _SHT_NOBITS = 2, 8
_SHN_UNDEF = 0
_STT_FUNC, _STT_NOTYPE = 2, 0
_STB_LOCAL = 0
# .nv.info record formats (byte 0 of a record) and the attributes read here (byte 1)
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_CBANK_PARAM_SIZE = 0x19


class CubinError(Exception):
    """The cubin cannot be read as a CUDA ELF file (truncated, malformed, not a cubin)."""


@dataclass(frozen=True)
class Param:
    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class CubinInfo:
    undefined: frozenset[str]  # functions called but not defined in the module: driver syscalls
    global_bytes: int  # the module's own __device__ memory, initialized or not
    params: dict[str, tuple[Param, ...]]  # by kernel (entry function) name, in ordinal order
    param_bytes: dict[str, int]  # by kernel: size of its parameter block
    code_digest: str = ""  # every section but the debug ones (line tables name the compiling
    # process's directory and follow its #line directives): equal digests, the same program


def inspect(cubin: bytes) -> CubinInfo:
    """Read the parts of a cubin the evaluator checks; raise CubinError if it is malformed."""
    try:
        return _inspect(memoryview(cubin))
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise CubinError(f"malformed cubin ({exc.__class__.__name__}: {exc})") from None


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


def _inspect(data: memoryview) -> CubinInfo:
    if bytes(data[:4]) != _ELF_MAGIC or data[4] != 2 or data[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize < 64 or shnum > 1 << 16 or shoff + shnum * shentsize > len(data):
        raise CubinError("section table out of bounds")
    raw = []
    for i in range(shnum):
        name, stype, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize)
        if stype != _SHT_NOBITS and offset + size > len(data):
            raise CubinError(f"section {i} out of bounds")
        raw.append((name, stype, offset, size, link, entsize))
    names = raw[shstrndx] if shstrndx < len(raw) else None
    if names is None:
        raise CubinError("no section name table")
    sections = [_Section(_cstr(data, names[2], names[3], n), t, o, s, lk, e) for n, t, o, s, lk, e in raw]

    # a module's own memory: its sections' sizes, or the extent of the objects in them, whichever
    # is larger (ptxas records a 100 GiB array with a section size of 0 and the array's true size)
    extent = {i: s.size for i, s in enumerate(sections) if s.name in (".nv.global", ".nv.global.init")}
    undefined: set[str] = set()
    for sec in sections:
        if sec.type != _SHT_SYMTAB or sec.entsize < 24 or sec.link >= len(sections):
            continue
        strtab = sections[sec.link]
        for off in range(sec.offset, sec.offset + sec.size - 23, sec.entsize):
            name, info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
            bind, kind = info >> 4, info & 0xF
            if shndx in extent:
                extent[shndx] = max(extent[shndx], value + size)
            if (shndx == _SHN_UNDEF and bind != _STB_LOCAL and kind in (_STT_FUNC, _STT_NOTYPE)
                    and (sym := _cstr(data, strtab.offset, strtab.size, name))):
                undefined.add(sym)
    global_bytes = sum(extent.values())
    params: dict[str, tuple[Param, ...]] = {}
    param_bytes: dict[str, int] = {}
    for sec in sections:
        if sec.name.startswith(".nv.info."):
            kernel = sec.name[len(".nv.info."):]
            found, total = _kernel_params(data[sec.offset:sec.offset + sec.size])
            params[kernel] = tuple(sorted(found, key=lambda p: p.ordinal))
            param_bytes[kernel] = total
    code = hashlib.sha256()
    for sec in sections:
        if "debug" not in sec.name:
            body = b"" if sec.type == _SHT_NOBITS else bytes(data[sec.offset:sec.offset + sec.size])
            code.update(struct.pack("<QQ", len(sec.name), sec.size) + sec.name.encode() + body)
    return CubinInfo(frozenset(undefined), global_bytes, params, param_bytes, code.hexdigest())


def _kernel_params(info: memoryview) -> tuple[list[Param], int]:
    """The EIATTR_KPARAM_INFO records of one kernel and its parameter block size."""
    params, total, i = [], 0, 0
    while i + 2 <= len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt == _EIFMT_NVAL:  # no value, but its record is 4 bytes like the others (sm_80, sm_86)
            i += 4
        elif fmt in (_EIFMT_BVAL, _EIFMT_HVAL):
            if attr == _EIATTR_CBANK_PARAM_SIZE:
                total, = struct.unpack_from("<H", info, i + 2)
            i += 4
        elif fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", info, i + 2)
            if i + 4 + size > len(info):
                raise CubinError("kernel info record out of bounds")
            if attr == _EIATTR_KPARAM_INFO and size >= 12:
                _index, ordinal, offset, flags = struct.unpack_from("<IHHI", info, i + 4)
                params.append(Param(ordinal, offset, flags >> 18))
            i += 4 + size
        else:
            raise CubinError(f"unknown kernel info record format {fmt}")
    return params, total


def _cstr(data: memoryview, start: int, size: int, offset: int) -> str:
    if offset >= size:
        raise CubinError("string table index out of bounds")
    end = bytes(data[start + offset:start + size]).find(b"\x00")
    if end < 0:
        raise CubinError("unterminated string")
    return bytes(data[start + offset:start + offset + end]).decode()
