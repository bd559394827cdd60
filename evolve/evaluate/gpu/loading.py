"""Loading a compiled candidate and launching it as its plan says, after checking that the code
is what the spec declares.

The cubin is read before the driver sees it: every kernel the spec launches must exist with a
parameter list the harness will pass (a pointer per buffer, an int32 per expression), or the
driver would copy whatever the kernel declares from the worker's host memory. After loading,
static plus dynamic shared memory must fit the device, and a cluster must be able to be resident.
Launches with a cluster or tensor maps go through ``cuLaunchKernelEx`` (``hopper``), the others
through CuPy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cupy as cp
import numpy as np
from cupy_backends.cuda.api import driver

from evolve.evaluate.gpu.device import CUDA_ERRORS, raise_cuda
from evolve.evaluate.gpu.failure import Fail
from evolve.evaluate.gpu.hopper import DriverError, Launcher, max_active_clusters
from evolve.evaluate.measurement import Status
from evolve.evaluate.plan import LaunchPlan, param_mismatch
from evolve.hardware import Hardware
from evolve.kernel.cubin import CubinError, inspect

DEFAULT_DYNAMIC_SHARED = 48 * 1024  # more than this needs the kernel's opt-in attribute


class Loaded:
    """A candidate's module on the device, with the functions its plans launch."""

    def __init__(self, cubin: bytes, plans: Mapping[str, LaunchPlan], hw: Hardware):
        try:
            self.info = inspect(cubin)
        except CubinError as exc:
            raise Fail(Status.REJECTED, f"the compiled module cannot be checked: {exc}") from None
        for plan in plans.values():
            if reason := param_mismatch(plan, self.info):
                raise Fail(Status.REJECTED, reason)
        self.module = cp.cuda.function.Module()
        try:
            self.module.load(cubin)
        except CUDA_ERRORS as exc:
            raise Fail(Status.COMPILE_ERROR, f"cannot load module: {exc}") from None
        self.hw = hw
        self.functions: dict[str, Any] = {}
        self._dynamic: dict[str, int] = {}  # dynamic shared memory each kernel is allowed
        self._launcher = Launcher()  # for launches with a cluster or tensor maps
        for plan in plans.values():
            self.add(plan)

    def add(self, plan: LaunchPlan) -> None:
        """Make a plan launchable: its kernels found and checked, their dynamic shared memory
        allowed (a plan for sizes not known when the module was loaded, too)."""
        if reason := param_mismatch(plan, self.info):
            raise Fail(Status.REJECTED, reason)
        for call in plan.calls:
            name, dynamic = call.kernel, call.shared
            fn = self.functions.get(name)
            if fn is None:
                try:
                    fn = self.functions[name] = self.module.get_function(name)
                except CUDA_ERRORS:
                    raise Fail(Status.COMPILE_ERROR,
                               f"kernel {name!r} not found: declare it extern \"C\" __global__") from None
                if name not in self.info.params:  # found by the driver, not in the cubin: unchecked
                    raise Fail(Status.REJECTED, f"the parameters of kernel {name!r} cannot be checked")
            if dynamic <= self._dynamic.get(name, -1):
                self._fits(fn, call)
                continue
            static = driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn.ptr)
            if static + dynamic > self.hw.max_shared_per_block:
                raise Fail(Status.LAUNCH_ERROR,
                           f"{name}: {static} bytes of static and {dynamic} of dynamic shared memory "
                           f"exceed the {self.hw.max_shared_per_block} bytes a block may use")
            if dynamic > DEFAULT_DYNAMIC_SHARED:
                try:
                    driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            dynamic)
                except CUDA_ERRORS as exc:
                    raise Fail(Status.LAUNCH_ERROR, f"{name}: {dynamic} bytes of dynamic shared memory "
                                                    f"refused by the driver ({exc})") from None
            self._dynamic[name] = dynamic
            self._fits(fn, call)

    @staticmethod
    def _fits(fn: Any, call: Any) -> None:
        """A cluster that can never be resident (too much shared memory or too many threads for
        the blocks of one cluster) is the candidate's launch error, found before any launch."""
        if call.cluster is None:
            return
        try:
            resident = max_active_clusters(fn.ptr, call)
        except DriverError as exc:
            raise Fail(Status.LAUNCH_ERROR, f"{call.kernel}: cluster {call.cluster}: {exc}") from None
        if resident < 1:
            raise Fail(Status.LAUNCH_ERROR, f"{call.kernel}: a cluster of {call.cluster} blocks of "
                                            f"{call.block} threads and {call.shared} bytes of dynamic "
                                            "shared memory cannot be resident on the GPU")

    def run(self, plan: LaunchPlan, buffers: Mapping[str, Any]) -> None:
        """Enqueue one call of the candidate: zero the scratch the spec zeroes, then each launch."""
        for s in plan.scratch:
            if s.zero:
                buf = buffers[s.name]
                buf.data.memset_async(0, buf.nbytes)
        maps = {m.name: m for m in plan.tensor_maps}
        for call in plan.calls:
            fn = self.functions[call.kernel]
            try:
                if call.cluster is not None or any(kind == "tensor_map" for kind, _ in call.args):
                    self._launcher.launch(fn.ptr, call, maps, buffers, cp.cuda.get_current_stream().ptr)
                    continue
                args = tuple(buffers[v] if kind == "buffer" else np.int32(v) for kind, v in call.args)
                fn(call.grid, call.block, args, shared_mem=call.shared)
            except (*CUDA_ERRORS, DriverError) as exc:
                where = f"grid={call.grid} block={call.block}"
                where += f" cluster={call.cluster}" if call.cluster else ""
                raise_cuda(exc, f"launching {call.kernel} {where}")

    def resources(self, plan: LaunchPlan, hw: Hardware) -> dict[str, dict[str, float]]:
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

