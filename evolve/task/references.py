"""Float64 references of the built-in tasks.

Each takes the array module (NumPy on the host or CuPy on the GPU), the task's inputs already
upcast to float64, and the problem sizes; it returns the expected outputs by name. A user's task
names its own function as ``module:function`` in ``task.reference``.
"""

from __future__ import annotations

from typing import Any

Arrays = dict[str, Any]
Sizes = dict[str, int]

LAYERNORM_EPS = 1e-5


def vector_add(xp: Any, x: Arrays, s: Sizes) -> Arrays:
    return {"c": x["a"] + x["b"]}


def reduce_sum(xp: Any, x: Arrays, s: Sizes) -> Arrays:
    return {"out": xp.sum(x["x"]).reshape(1)}


def softmax(xp: Any, x: Arrays, s: Sizes) -> Arrays:
    v = x["x"]
    e = xp.exp(v - v.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}


def layernorm(xp: Any, x: Arrays, s: Sizes) -> Arrays:
    v = x["x"]
    mean = v.mean(axis=1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=1, keepdims=True)
    return {"y": (v - mean) / xp.sqrt(var + LAYERNORM_EPS) * x["gamma"] + x["beta"]}


def transpose(xp: Any, x: Arrays, s: Sizes) -> Arrays:
    return {"out": xp.ascontiguousarray(x["x"].T)}


def sgemm(xp: Any, x: Arrays, s: Sizes) -> Arrays:
    return {"c": x["a"] @ x["b"]}


def linear(xp: Any, x: Arrays, s: Sizes) -> Arrays:
    """``torch.nn.functional.linear`` without bias: y[M, N] = x[M, K] @ w[N, K]^T."""
    return {"y": x["x"] @ x["w"].T}
