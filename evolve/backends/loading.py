"""Loading a compiled candidate and launching it as its plan says, after checking that the code
is what the spec declares.

The cubin is read before the driver sees it: every kernel the spec launches must exist with a
parameter list the harness will pass (a pointer per buffer, an int32 per expression), or the
driver would copy whatever the kernel declares from the worker's host memory. After loading,
static plus dynamic shared memory must fit the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cupy as cp
import numpy as np
from cupy_backends.cuda.api import driver

from evolve.backends.device import CUDA_ERRORS, raise_cuda
from evolve.backends.failure import Fail
from evolve.cubin import CubinError, inspect
from evolve.hardware import Hardware
from evolve.measurement import Status
from evolve.plan import Plan, param_mismatch

DEFAULT_DYNAMIC_SHARED = 48 * 1024  # more than this needs the kernel's opt-in attribute


class Loaded:
    """A candidate's module on the device, with the functions its plans launch."""

    def __init__(self, cubin: bytes, plans: Mapping[str, Plan], hw: Hardware):
        try:
            info = inspect(cubin)
        except CubinError as exc:
            raise Fail(Status.REJECTED, f"the compiled module cannot be checked: {exc}") from None
        for plan in plans.values():
            if reason := param_mismatch(plan, info):
                raise Fail(Status.REJECTED, reason)
        self.module = cp.cuda.function.Module()
        try:
            self.module.load(cubin)
        except CUDA_ERRORS as exc:
            raise Fail(Status.COMPILE_ERROR, f"cannot load module: {exc}") from None
        self.functions: dict[str, Any] = {}
        need: dict[str, int] = {}
        for plan in plans.values():
            for call in plan.calls:
                need[call.kernel] = max(need.get(call.kernel, 0), call.shared)
        for name, dynamic in need.items():
            try:
                fn = self.functions[name] = self.module.get_function(name)
            except CUDA_ERRORS:
                raise Fail(Status.COMPILE_ERROR,
                           f"kernel {name!r} not found: declare it extern \"C\" __global__") from None
            if name not in info.params:  # found by the driver, not in the cubin: unchecked
                raise Fail(Status.REJECTED, f"the parameters of kernel {name!r} cannot be checked")
            static = driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn.ptr)
            if static + dynamic > hw.max_shared_per_block:
                raise Fail(Status.LAUNCH_ERROR,
                           f"{name}: {static} bytes of static and {dynamic} of dynamic shared memory "
                           f"exceed the {hw.max_shared_per_block} bytes a block may use")
            if dynamic > DEFAULT_DYNAMIC_SHARED:
                try:
                    driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            dynamic)
                except CUDA_ERRORS as exc:
                    raise Fail(Status.LAUNCH_ERROR, f"{name}: {dynamic} bytes of dynamic shared memory "
                                                    f"refused by the driver ({exc})") from None

    def run(self, plan: Plan, buffers: Mapping[str, Any]) -> None:
        """Enqueue one call of the candidate: zero the scratch the spec zeroes, then each launch."""
        for s in plan.scratch:
            if s.zero:
                buf = buffers[s.name]
                buf.data.memset_async(0, buf.nbytes)
        for call in plan.calls:
            args = tuple(buffers[v] if kind == "buffer" else np.int32(v) for kind, v in call.args)
            try:
                self.functions[call.kernel](call.grid, call.block, args, shared_mem=call.shared)
            except CUDA_ERRORS as exc:
                raise_cuda(exc, f"launching {call.kernel} grid={call.grid} block={call.block}")

    def resources(self, plan: Plan, hw: Hardware) -> dict[str, dict[str, float]]:
        """Registers, local and shared memory and occupancy of each kernel of a plan."""
        out = {}
        for call in plan.calls:
            ptr = self.functions[call.kernel].ptr
            get = driver.funcGetAttribute
            threads = call.block[0] * call.block[1] * call.block[2]
            try:
                blocks = driver.occupancyMaxActiveBlocksPerMultiprocessor(ptr, threads, call.shared)
            except CUDA_ERRORS:
                blocks = 0
            out[call.kernel] = {
                "registers": get(driver.CU_FUNC_ATTRIBUTE_NUM_REGS, ptr),
                "local_bytes": get(driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, ptr),
                "static_shared_bytes": get(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, ptr),
                "dynamic_shared_bytes": call.shared,
                "threads_per_block": threads,
                "occupancy": blocks * threads / hw.max_threads_per_sm,
            }
        return out

