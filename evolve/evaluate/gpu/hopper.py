"""What Hopper kernels need from the driver and cannot make themselves (they have no host code):
TMA tensor maps encoded over the harness's own buffers, and launches with a thread-block cluster
or a 128-byte ``CUtensorMap`` passed by value (``cuLaunchKernelEx``). CuPy exposes neither, so
these are ctypes calls into libcuda, the library CuPy itself runs on, in the same context.

A map is encoded from the device buffer it describes (its pointer, true extents and byte
strides), so the hardware's own bounds check is the buffer's: a box that runs past the edge is
zero-filled on loads and clipped on stores, and a map can reach nothing its buffer's pointer
could not. Encodings are cached by the plan's map and the buffer's address, shape and strides: a
reallocated buffer gets a new one.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping
from typing import Any

from evolve.dtypes import ITEMSIZE
from evolve.evaluate.gpu.failure import Fail
from evolve.evaluate.measurement import Status
from evolve.evaluate.plan import ARG_ALIGN, ARG_BYTES, Call
from evolve.kernel.tensor_maps import TensorMap

TENSOR_MAP_BYTES, _TENSOR_MAP_ALIGN = ARG_BYTES["tensor_map"], ARG_ALIGN["tensor_map"]
# CUtensorMapDataType by dtype; any other dtype is copied as raw bits of its width
_DATA_TYPE = {"float16": 6, "bfloat16": 9, "float32": 7, "float64": 8, "int32": 3, "int64": 5,
              "uint32": 2}
_RAW_TYPE = {1: 0, 2: 1, 4: 2, 8: 4}  # UINT8, UINT16, UINT32, UINT64
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # CU_TENSOR_MAP_SWIZZLE_NONE, _32B, _64B, _128B
_INTERLEAVE_NONE = 0
_L2_PROMOTION_128B = 2
_OOB_FILL_ZERO = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as zero
_ATTR_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_MAX_CACHED = 256


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("cluster", ctypes.c_uint * 3)]


class _LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("num_attrs", ctypes.c_uint)]


class DriverError(Exception):
    """A libcuda call failed; the message names the call and the driver's error."""


@functools.cache
def libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    u32, u64, vp = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
    lib.cuTensorMapEncodeTiled.argtypes = [vp, ctypes.c_int, u32, vp, ctypes.POINTER(u64),
                                           ctypes.POINTER(u64), ctypes.POINTER(u32), ctypes.POINTER(u32),
                                           ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), vp, ctypes.POINTER(vp), vp]
    lib.cuOccupancyMaxActiveClusters.argtypes = [ctypes.POINTER(ctypes.c_int), vp,
                                                 ctypes.POINTER(_LaunchConfig)]
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def check_result(result: int, call: str) -> None:
    if result:
        name = ctypes.c_char_p()
        libcuda().cuGetErrorName(result, ctypes.byref(name))
        raise DriverError(f"{call} failed: {(name.value or b'CUDA error %d' % result).decode()}")


class _Aligned:
    """128 bytes of host memory on a 64-byte boundary: one CUtensorMap."""

    def __init__(self) -> None:
        self._raw = (ctypes.c_ubyte * (TENSOR_MAP_BYTES + _TENSOR_MAP_ALIGN))()
        base = ctypes.addressof(self._raw)
        self.address = base + (-base % _TENSOR_MAP_ALIGN)

    def bytes(self) -> bytes:
        return ctypes.string_at(self.address, TENSOR_MAP_BYTES)


def _interface(array: Any) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Pointer, shape and byte strides of a device array (CuPy, PyTorch: anything with
    __cuda_array_interface__)."""
    iface = array.__cuda_array_interface__
    shape = tuple(iface["shape"])
    item = int(iface["typestr"][2:])
    strides = iface.get("strides")
    if strides is None:  # C-contiguous
        strides, step = [], item
        for d in reversed(shape):
            strides.insert(0, step)
            step *= d
    return int(iface["data"][0]), shape, tuple(strides)


def _layout(array: Any) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """A device array's address, shape and byte strides: CuPy's own attributes (cheap: this runs
    inside timed calls), else its __cuda_array_interface__."""
    ptr = getattr(getattr(array, "data", None), "ptr", None)
    if isinstance(ptr, int):
        return ptr, array.shape, array.strides
    return _interface(array)


def encode(m: TensorMap, array: Any) -> _Aligned:
    """cuTensorMapEncodeTiled over ``array``, which must be the buffer the plan describes."""
    ptr, shape, strides = _layout(array)
    item = ITEMSIZE[m.dtype]
    expected = (*reversed(m.strides), item)
    # the map's figures are the plan's: the array must be exactly that memory (a stride of an
    # extent of 1 addresses nothing)
    same = shape == tuple(reversed(m.dims)) and all(
        n == 1 or s == e for n, s, e in zip(shape, strides, expected, strict=True))
    if not same:
        raise Fail(Status.LAUNCH_ERROR, f"tensor map {m.name}: {m.buffer} is {list(shape)} with byte strides "
                                        f"{list(strides)}; the plan's map is over {list(reversed(m.dims))} "
                                        f"with {list(expected)}")
    rank = len(m.dims)
    out = _Aligned()
    dims = (ctypes.c_uint64 * rank)(*m.dims)
    strides_arr = (ctypes.c_uint64 * max(1, rank - 1))(*m.strides)
    box = (ctypes.c_uint32 * rank)(*m.box)
    ones = (ctypes.c_uint32 * rank)(*([1] * rank))
    dtype = _DATA_TYPE.get(m.dtype, _RAW_TYPE[item])
    try:
        check_result(libcuda().cuTensorMapEncodeTiled(
            out.address, dtype, rank, ptr, dims, strides_arr, box, ones, _INTERLEAVE_NONE,
            _SWIZZLE[m.swizzle], _L2_PROMOTION_128B, _OOB_FILL_ZERO), "cuTensorMapEncodeTiled")
    except DriverError as exc:
        raise Fail(Status.LAUNCH_ERROR, f"tensor map {m.name} over {m.buffer} (dims {list(m.dims)}, box "
                                        f"{list(m.box)}, swizzle {m.swizzle or 'none'}): {exc}") from None
    return out


def launch_config(call: Call, stream: int) -> tuple[_LaunchConfig, Any]:
    attrs = (_LaunchAttribute * 1)()
    n = 0
    if call.cluster is not None:
        attrs[0].id = _ATTR_CLUSTER_DIMENSION
        attrs[0].value.cluster[:] = call.cluster
        n = 1
    config = _LaunchConfig((ctypes.c_uint * 3)(*call.grid), (ctypes.c_uint * 3)(*call.block), call.shared,
                           stream, attrs, n)
    return config, attrs


def max_active_clusters(function: int, call: Call) -> int:
    """How many clusters of ``call``'s shape can be resident at once (0: none can launch)."""
    config, _attrs = launch_config(call, 0)
    n = ctypes.c_int()
    check_result(libcuda().cuOccupancyMaxActiveClusters(ctypes.byref(n), function, ctypes.byref(config)),
           "cuOccupancyMaxActiveClusters")
    return n.value


class Launcher:
    """Launches through cuLaunchKernelEx, with the tensor maps each call's buffers need."""

    def __init__(self) -> None:
        self._maps: dict[tuple[TensorMap, Any], _Aligned] = {}
        self._prepared: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def tensor_map(self, m: TensorMap, array: Any) -> _Aligned:
        """The map over this very buffer: encoded again for any other allocation or shape."""
        key = (m, _layout(array))
        found = self._maps.get(key)
        if found is None:
            found = encode(m, array)
            if len(self._maps) >= _MAX_CACHED:
                self._maps.clear()
            self._maps[key] = found
        return found

    def launch(self, function: int, call: Call, maps: Mapping[str, TensorMap],
               buffers: Mapping[str, Any], stream: int) -> None:
        """Enqueue ``call``; raise DriverError where the driver refuses it."""
        used = tuple(maps.get(str(v)) for kind, v in call.args if kind == "tensor_map")
        ptrs = tuple(_layout(buffers[v])[0] if kind == "buffer" else
                     _layout(buffers[maps[str(v)].buffer]) if kind == "tensor_map" and str(v) in maps
                     else v for kind, v in call.args)
        key = (function, call, used, ptrs, stream)  # a map's extents, its buffer's address and shape
        prepared = self._prepared.get(key)
        if prepared is None:
            holders: list[Any] = []
            for (kind, v), p in zip(call.args, ptrs, strict=True):
                if kind == "buffer":
                    holders.append(ctypes.c_void_p(p))
                elif kind == "int32":
                    holders.append(ctypes.c_int32(int(v)))
                elif (m := maps.get(str(v))) is not None:
                    holders.append(self.tensor_map(m, buffers[m.buffer]))
                else:  # not made at these sizes (its 'when' is false): 128 zero bytes
                    holders.append(_Aligned())
            params = (ctypes.c_void_p * max(1, len(holders)))(
                *[h.address if isinstance(h, _Aligned) else ctypes.addressof(h) for h in holders])
            config, attrs = launch_config(call, stream)
            prepared = (config, params, attrs, holders)
            if len(self._prepared) >= _MAX_CACHED:
                self._prepared.clear()
            self._prepared[key] = prepared
        config, params = prepared[0], prepared[1]
        check_result(libcuda().cuLaunchKernelEx(ctypes.byref(config), function, params, None),
               f"cuLaunchKernelEx of {call.kernel}")
