"""The GPU as the harness sees it: its properties, its errors, and its measured bandwidth."""

from __future__ import annotations

from typing import Any, NoReturn

import cupy as cp
import numpy as np
from cupy_backends.cuda.api import driver, runtime

from evolve.evaluate.gpu.failure import Crashed, Fail
from evolve.evaluate.measurement import Status, TimingStats
from evolve.kernel.compiler import compile_cuda

CUDA_ERRORS = (driver.CUDADriverError, runtime.CUDARuntimeError)

# The harness's own read-only stream (not a candidate): 16-byte loads, four in flight per thread.
_READ_STREAM = r"""
extern "C" __global__ void __launch_bounds__(256)
read_stream(const float4* __restrict__ x, long long n4, float* __restrict__ sink) {
    long long stride = (long long)gridDim.x * 256, i = (long long)blockIdx.x * 256 + threadIdx.x;
    float acc = 0.f;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 a = x[i], b = x[i + stride], c = x[i + 2 * stride], d = x[i + 3 * stride];
        acc += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w))
             + ((c.x + c.y) + (c.z + c.w)) + ((d.x + d.y) + (d.z + d.w));
    }
    for (; i < n4; i += stride) {
        float4 a = x[i];
        acc += (a.x + a.y) + (a.z + a.w);
    }
    if (acc == -1.0f) sink[0] = acc;  // never true for the data used; keeps the loads alive
}
"""


def device_properties(device: int) -> dict[str, Any]:
    attr = runtime.deviceGetAttribute
    props = runtime.getDeviceProperties(device)
    name = props["name"]
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "major": props["major"],
        "minor": props["minor"],
        "sms": attr(runtime.cudaDevAttrMultiProcessorCount, device),
        "max_threads_per_block": attr(runtime.cudaDevAttrMaxThreadsPerBlock, device),
        "max_threads_per_sm": attr(runtime.cudaDevAttrMaxThreadsPerMultiProcessor, device),
        "max_shared_per_block": attr(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "shared_per_sm": attr(runtime.cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
        "registers_per_sm": attr(runtime.cudaDevAttrMaxRegistersPerMultiprocessor, device),
        "l2_bytes": attr(runtime.cudaDevAttrL2CacheSize, device),
        "memory_bytes": int(props["totalGlobalMem"]),
        "driver": runtime.driverGetVersion(),
        "pci_bus": attr(runtime.cudaDevAttrPciBusId, device),
    }


def synchronize(where: str) -> None:
    """Wait for the device; an error raised by a kernel becomes the candidate's."""
    try:
        runtime.deviceSynchronize()
    except CUDA_ERRORS as exc:
        raise_cuda(exc, where)


def raise_cuda(exc: Exception, where: str) -> NoReturn:
    """A launch refused by the driver is the candidate's fault; a poisoned context is fatal."""
    try:
        runtime.deviceSynchronize()
    except CUDA_ERRORS:
        raise Crashed(f"{exc} {where}") from None
    raise Fail(Status.LAUNCH_ERROR, f"{exc} {where}") from None


def measure_ceilings(arch: str, sms: int, max_threads_per_sm: int, nbytes: int = 1 << 32,
                     samples: int = 20) -> dict[str, float]:
    """Bandwidths in bytes/s: a device-to-device copy (bytes read + written) and a read-only
    stream, each the median of ``samples`` after a warm-up."""
    src = cp.empty(nbytes, dtype=cp.uint8)
    dst = cp.empty_like(src)
    src.fill(7)
    sink = cp.zeros(1, dtype=cp.float32)
    module = cp.cuda.function.Module()
    module.load(compile_cuda(_READ_STREAM, {}, arch).cubin)
    read = module.get_function("read_stream")
    n4 = np.int64(nbytes // 16)
    grid = (sms * (max_threads_per_sm // 256), 1, 1)

    def copy() -> None:
        runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, 0)

    def stream() -> None:
        read(grid, (256, 1, 1), (src, n4, sink))

    out = {}
    for key, op, moved in (("copy_bandwidth_bps", copy, 2 * nbytes),
                           ("read_bandwidth_bps", stream, nbytes)):
        for _ in range(3):
            op()
        times = []
        for _ in range(samples):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            op()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        out[key] = moved / TimingStats.of(times).median_s
    return out
