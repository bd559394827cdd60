"""What a GPU engineer would otherwise use for each built-in task: PyTorch eager,
``torch.compile`` and CuPy/cuBLAS. Each peer is a callable on the benchmark's own buffers
(shared with PyTorch through DLPack) that returns its output, so it is checked against the
task's float64 reference before it is timed. fp32 stays fp32: TF32 is switched off in PyTorch
and CuPy, so no side uses tensor cores."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
}


def torch_peers(task: str, arrays: Mapping[str, Any], compile_modes: Sequence[str]) -> dict[str, Peer]:
    """``torch`` (eager, into the task's output buffer where PyTorch has an ``out=``) and one
    ``torch.compile (<mode>)`` per mode. A peer that fails to build is left out with a warning:
    the table says it is missing."""
    try:
        import torch
    except ImportError:
        log.warning("PyTorch is not installed: no torch peers")
        return {}
    if task not in _TORCH:
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    t = {k: torch.from_dlpack(v) for k, v in arrays.items()}
    fn = _TORCH[task]
    names = list(fn.__code__.co_varnames[1:fn.__code__.co_argcount])
    ins = [t[n] for n in names]
    eager = {
        "vector_add": lambda: torch.add(t["a"], t["b"], out=t["c"]),
        "sgemm": lambda: torch.matmul(t["a"], t["b"], out=t["c"]),
    }.get(task, lambda: fn(torch, *ins))
    out: dict[str, Peer] = {"torch": eager}
    for mode in compile_modes:
        try:
            compiled = torch.compile(lambda *xs: fn(torch, *xs), mode=mode, dynamic=False)
            compiled(*ins)  # compiles (and autotunes) now, not inside the timing
            torch.cuda.synchronize()
            out[f"torch.compile ({mode})"] = lambda compiled=compiled: compiled(*ins)
        except Exception as exc:  # inductor or Triton missing or failing: say so, go on
            log.warning("torch.compile(mode=%s) failed on %s: %s", mode, task, str(exc).splitlines()[0])
    return out


def cupy_peers(task: str, arrays: Mapping[str, Any]) -> dict[str, Peer]:
    """CuPy's own routines (cuBLAS for the matrix product, CUB for the sum)."""
    import cupy as cp

    os.environ.pop("CUPY_TF32", None)  # read by CuPy at each matmul: keep fp32 math
    a = arrays
    table: dict[str, tuple[str, Peer]] = {
        "vector_add": ("cupy", lambda: cp.add(a["a"], a["b"], out=a["c"])),
        "reduce_sum": ("cupy", lambda: cp.sum(a["x"], out=a["out"].reshape(()))),
        "transpose": ("cupy", lambda: cp.copyto(a["out"], a["x"].T)),
        "sgemm": ("cuBLAS (cupy.matmul)", lambda: cp.matmul(a["a"], a["b"], out=a["c"])),
    }
    if task not in table:
        return {}
    name, fn = table[task]
    return {name: fn}
