"""What a GPU engineer would otherwise use for each built-in task: PyTorch eager (cuBLAS for the
matrix products), ``torch.compile``, CuPy/cuBLAS, a Triton kernel written for it
(``evolve.bench.triton_kernels``, autotuned) and, for sgemm and softmax, TVM's default GPU schedule
(``evolve.bench.tvm_kernels``). Each peer is a callable on the benchmark's own buffers
(shared with PyTorch through DLPack, bfloat16's bits viewed as bfloat16) that writes or returns
the output, so it is checked against the task's float64 reference before it is timed. Every side
computes what the task asks: fp32 stays fp32 (TF32 off in PyTorch and CuPy), and half-precision
products are accumulated in fp32 (PyTorch's reduced-precision reductions off)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evolve.task.task import Task

log = logging.getLogger(__name__)
Peer = Callable[[], Any]

# the task's functional form, per task: arrays in (by argument name) -> output array
_TORCH: dict[str, Callable[..., Any]] = {
    "vector_add": lambda t, a, b: a + b,
    "reduce_sum": lambda t, x: t.sum(x).reshape(1),
    "softmax": lambda t, x: t.softmax(x, dim=1),
    "layernorm": lambda t, x, gamma, beta: t.nn.functional.layer_norm(x, (x.shape[1],), gamma, beta, 1e-5),
    "transpose": lambda t, x: x.t().contiguous(),
    "sgemm": lambda t, a, b: t.matmul(a, b),
    "hgemm": lambda t, x, w: t.nn.functional.linear(x, w),
    "bgemm": lambda t, x, w: t.nn.functional.linear(x, w),
}


def tensors(task: Task, arrays: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark's CuPy arrays as PyTorch tensors over the same memory, in the task's dtypes."""
    import torch

    out = {}
    for arg in task.args:
        arr = arrays[arg.name]
        out[arg.name] = (torch.from_dlpack(arr.view("int16")).view(torch.bfloat16) if arg.dtype == "bfloat16"
                         else torch.from_dlpack(arr))
    return out


def full_precision(torch: Any) -> None:
    """PyTorch computes what a task asks: fp32 stays fp32 (TF32 off for matmuls and cuDNN), and
    half-precision products are accumulated in fp32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.set_float32_matmul_precision("highest")


def torch_peers(task: Task, arrays: Mapping[str, Any], compile_modes: Sequence[str]) -> dict[str, Peer]:
    """``torch`` (eager, into the task's output buffer where PyTorch has an ``out=``) and one
    ``torch.compile (<mode>)`` per mode. A peer that fails to build is left out with a warning:
    the table says it is missing."""
    try:
        import torch
    except ImportError:
        log.warning("PyTorch is not installed: no torch peers")
        return {}
    if task.name not in _TORCH:
        return {}
    full_precision(torch)
    t = tensors(task, arrays)
    fn = _TORCH[task.name]
    names = list(fn.__code__.co_varnames[1:fn.__code__.co_argcount])
    ins = [t[n] for n in names]
    eager = {
        "vector_add": lambda: torch.add(t["a"], t["b"], out=t["c"]),
        "sgemm": lambda: torch.matmul(t["a"], t["b"], out=t["c"]),
    }.get(task.name, lambda: fn(torch, *ins))
    if task.name in ("hgemm", "bgemm"):
        eager = lambda: torch.matmul(t["x"], t["w"].t(), out=t["y"])  # noqa: E731 (F.linear has no out=)
    out: dict[str, Peer] = {"torch": eager}
    for mode in compile_modes:
        try:
            compiled = torch.compile(lambda *xs: fn(torch, *xs), mode=mode, dynamic=False)
            compiled(*ins)  # compiles (and autotunes) now, not inside the timing
            torch.cuda.synchronize()
            out[f"torch.compile ({mode})"] = lambda compiled=compiled: compiled(*ins)
        except Exception as exc:  # inductor or Triton missing or failing: say so, go on
            log.warning("torch.compile(mode=%s) failed on %s: %s", mode, task.name, str(exc).splitlines()[0])
    return out


def triton_peers(task: Task, arrays: Mapping[str, Any]) -> dict[str, Peer]:
    """"Triton": the task's kernel of ``evolve.bench.triton_kernels``, autotuned on its first call
    (the check, before any timing). Left out with a warning where Triton or PyTorch is missing."""
    try:
        import torch

        from evolve.bench import triton_kernels
    except ImportError as exc:
        log.warning("no Triton peer (%s)", exc)
        return {}
    if task.name not in triton_kernels.TASKS:
        return {}
    t = tensors(task, arrays)
    t["partial"] = torch.empty(triton_kernels.REDUCE_PROGRAMS, dtype=torch.float32, device="cuda")
    return {"Triton": lambda: triton_kernels.launch(task.name, t)}


def tvm_peers(task: Task, arrays: Mapping[str, Any]) -> dict[str, Peer]:
    """"TVM (dlight)": the task's TE definition under dlight's default GPU rules, built for this
    GPU before any timing. Left out with a warning where TVM is missing or fails to build."""
    try:
        from evolve.bench import tvm_kernels
    except ImportError as exc:
        log.warning("no TVM peer (%s)", exc)
        return {}
    if task.name not in tvm_kernels.TASKS:
        return {}
    import tvm

    try:
        target = tvm.target.Target.from_device("cuda")
        func = tvm_kernels.definition(task.name, {name: a.shape for name, a in arrays.items()})
        return {"TVM (dlight)": tvm_kernels.launcher(tvm_kernels.dlight(func, target), target, task.name,
                                                     arrays)}
    except Exception as exc:  # no CUDA runtime, NVRTC or headers: say so, go on
        log.warning("TVM failed on %s: %s", task.name, (str(exc).strip().splitlines() or [repr(exc)])[0])
        return {}


def cupy_peers(task: Task, arrays: Mapping[str, Any]) -> dict[str, Peer]:
    """CuPy's own routines (cuBLAS for the matrix products CuPy has types for, CUB for the sum)."""
    import cupy as cp

    os.environ.pop("CUPY_TF32", None)  # read by CuPy at each matmul: keep fp32 math
    a = arrays
    table: dict[str, tuple[str, Peer]] = {
        "vector_add": ("cupy", lambda: cp.add(a["a"], a["b"], out=a["c"])),
        "reduce_sum": ("cupy", lambda: cp.sum(a["x"], out=a["out"].reshape(()))),
        "transpose": ("cupy", lambda: cp.copyto(a["out"], a["x"].T)),
        "sgemm": ("cuBLAS (cupy.matmul)", lambda: cp.matmul(a["a"], a["b"], out=a["c"])),
        "hgemm": ("cuBLAS (cupy.matmul)", lambda: cp.matmul(a["x"], a["w"].T, out=a["y"])),
    }
    if task.name not in table:
        return {}
    name, fn = table[task.name]
    return {name: fn}
