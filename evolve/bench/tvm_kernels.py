"""TVM kernels for two built-in tasks, sgemm and softmax: the "TVM (dlight)" peer of ``evolve-bench``,
what a user of TVM would get without writing a schedule. Each task is a TE compute (``topi.nn.softmax`` for
softmax, the fp32 product for sgemm) at the benchmark's static shapes, scheduled by dlight's default
GPU rules (``ApplyDefaultSchedule``; fp32 has no tensor-core rule, so the product stays fp32 FMA).
No MetaSchedule peer: in apache-tvm 0.27.0.post1 a ``TuneContext`` with its post-order-apply space
segfaults (``tvm::ffi::ToJSONGraph``) for any target, before any GPU work. TVM compiles the generated
CUDA with NVRTC when the module is loaded (``cuda-bindings`` and the CUDA headers under
``CUDA_PATH``), with ``--use_fast_math``.

TVM 0.2x's API: ``tvm.tirx`` and ``tvm.s_tir`` (no ``tvm.tir``), JSON-dict targets, ``tvm.compile``.
Importing this module needs ``apache-tvm``; nothing else in cuda-evolve does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tvm
from tvm import te, topi
from tvm.s_tir import dlight as dl

TASKS = ("sgemm", "softmax")
ARGS = {"sgemm": ("a", "b", "c"), "softmax": ("x", "y")}  # the task's arguments, in the kernel's order
RULES = (dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback())


def definition(task: str, shapes: Mapping[str, Sequence[int]]) -> tvm.tirx.PrimFunc:
    """The task at these input shapes (by argument name), unscheduled: buildable for any target."""
    if task == "sgemm":
        (m, k), (_, n) = shapes["a"], shapes["b"]
        a = te.placeholder((m, k), "float32", name="a")
        b = te.placeholder((k, n), "float32", name="b")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
        return te.create_prim_func([a, b, c])
    if task == "softmax":
        x = te.placeholder(tuple(shapes["x"]), "float32", name="x")
        return te.create_prim_func([x, topi.nn.softmax(x, axis=1)])
    raise KeyError(f"no TVM definition for task {task!r}; tasks with one: {', '.join(TASKS)}")


def dlight(func: tvm.tirx.PrimFunc, target: tvm.target.Target) -> tvm.IRModule:
    """TVM's default GPU schedule: the first dlight rule that matches each block."""
    with target:
        return dl.ApplyDefaultSchedule(*RULES)(tvm.IRModule({"main": func}))


def cuda_source(mod: tvm.IRModule, target: tvm.target.Target) -> str:
    """The CUDA C that TVM generates for a scheduled module (no GPU needed)."""
    return tvm.compile(mod, target=target).mod.imports[0].inspect_source("cuda")


def launcher(mod: tvm.IRModule, target: tvm.target.Target, task: str,
             arrays: Mapping[str, Any]) -> Callable[[], None]:
    """One call of the built module on the task's CuPy arrays (shared through DLPack, zero-copy),
    on the default stream; built and NVRTC-compiled now, not inside the timing."""
    main = tvm.compile(mod, target=target)["main"]
    tensors = [tvm.runtime.from_dlpack(arrays[name]) for name in ARGS[task]]
    return lambda: main(*tensors)
