"""Runs the Triton peer's kernels under Triton's CPU interpreter, every configuration at the task's
correctness sizes small enough for it, judged by the evaluator's comparison. Triton reads
TRITON_INTERPRET when it is imported, so this runs in a process of its own (tests/test_triton_peers.py
starts it): ``TRITON_INTERPRET=1 python tests/triton_interpreted.py TASK...`` prints one JSON line."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter

from evolve import dtypes
from evolve.bench import triton_kernels as kernels
from evolve.task.correctness import compare_all
from evolve.task.task import Task, builtin_task

MAX_ELEMENTS = 200_000  # per argument: the interpreter runs each program in NumPy
MAX_FLOPS = 5e7
# beyond the task's sizes: more blocks than reduce_sum's first pass has programs (each loops)
EXTRA = {"reduce_sum": [{"n": (1 << 21) + 3}]}


def _widen_bf16(h: interpreter.TensorHandle) -> interpreter.TensorHandle:
    if h.dtype != tl.bfloat16:
        return h
    return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)


# Two bfloat16 faults of Triton's interpreter (3.9), which keeps bfloat16 as uint16 bits, mended
# here so that bgemm runs as the GPU runs it: tl.dot hands those bits to np.matmul as integers, and
# float32 -> bfloat16 truncates where the GPU rounds to nearest even.
_dot, _cast = interpreter.InterpreterBuilder.create_dot, interpreter.InterpreterBuilder.cast_impl


def _create_dot(self: Any, a: Any, b: Any, *rest: Any) -> Any:
    return _dot(self, _widen_bf16(a), _widen_bf16(b), *rest)


def _cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
    if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
        return interpreter.TensorHandle(dtypes.store(src.data, "bfloat16"), tl.bfloat16)
    return _cast(self, src, dst_type)


interpreter.InterpreterBuilder.create_dot = _create_dot
interpreter.InterpreterBuilder.cast_impl = _cast_impl


def small_sizes(t: Task) -> list[dict[str, int]]:
    def fits(s: dict[str, int]) -> bool:
        return max(int(np.prod(t.shape(a, s))) for a in t.args) <= MAX_ELEMENTS and t.flops(s) <= MAX_FLOPS

    return [s for s in t.correctness_sizes if fits(s)] + EXTRA.get(t.name, [])


def tensor(arr: np.ndarray, dtype: str) -> Any:
    """A CPU tensor over an array in its storage (bfloat16 bits viewed as bfloat16)."""
    if dtype == "bfloat16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def storage(t: Any, dtype: str) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16) if dtype == "bfloat16" else t.numpy()


def check(name: str) -> dict[str, Any]:
    t = builtin_task(name)
    rng = np.random.default_rng(0)
    sizes, problems = small_sizes(t), []
    for i, s in enumerate(sizes):
        inputs = t.make_inputs(np, s, 100 + i)
        refs = t.expected(np, inputs, s)
        for config in kernels.configs(name):
            fills = {a.name: dtypes.unwritten(a.dtype, rng) for a in t.outputs}
            outs = {a.name: np.full(t.shape(a, s), fills[a.name], dtypes.storage(a.dtype)) for a in t.outputs}
            tensors = {a.name: tensor(inputs[a.name] if a.role == "input" else outs[a.name], a.dtype)
                       for a in t.args}
            tensors["partial"] = torch.full((kernels.REDUCE_PROGRAMS,), float("nan"))
            kernels.launch(name, tensors, config)
            got = {a.name: storage(tensors[a.name], a.dtype) for a in t.outputs}
            if reason := compare_all(np, t, got, refs, fills, s):
                problems.append(f"{s} {config}: {reason}")
    return {"sizes": sizes, "configs": len(kernels.configs(name)), "problems": problems}


if __name__ == "__main__":
    print(json.dumps({name: check(name) for name in sys.argv[1:]}))
