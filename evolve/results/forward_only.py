"""The tuned kernel computes a forward pass only; its custom op still needs an autograd formula.

Without one, ``torch.compile`` of a module whose inputs require gradients (a ModelNew after a
``Linear`` in grad mode) fails at compile time: AOTAutograd traces the backward graph, even when
no backward is ever run. The formula given here traces (under fake tensors its gradients are
empty tensors) and raises a one-line error only when a backward really runs, so eager and compiled
inference work in grad mode and training through the kernel is refused instead of silently
dropping gradients.
"""

from __future__ import annotations

import functools
from typing import Any

NO_BACKWARD = ("{op} has no backward: a cuda-evolve kernel computes the forward pass only; run it "
               "under torch.no_grad() or keep the PyTorch op where gradients are needed")

@functools.cache
def _no_gradient() -> Any:
    """``torch.ops.cuda_evolve.no_gradient(grad, op, shape, dtype)``: raises when run, an empty
    tensor of the input's shape and dtype when traced (registered once per process)."""
    import torch

    def no_gradient(grad: Any, op: str, shape: list[int], dtype: Any) -> Any:
        raise RuntimeError(NO_BACKWARD.format(op=op))

    made = torch.library.custom_op("cuda_evolve::no_gradient", no_gradient, mutates_args=(),
                                   schema="(Tensor grad, str op, SymInt[] shape, ScalarType dtype) -> Tensor")
    made.register_fake(lambda grad, op, shape, dtype: grad.new_empty(shape, dtype=dtype))
    return made


def forward_only(qualname: str, lib: Any = None) -> None:
    """Give the functional custom op ``qualname`` (``namespace::name``; defined in ``lib``, a
    ``torch.library.Library``, or by ``torch.library.custom_op``) the formula above."""
    import torch

    no_gradient = _no_gradient()

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.like = [(list(v.shape), v.dtype) if isinstance(v, torch.Tensor) else None for v in inputs]

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        grad = next((g for g in grads if isinstance(g, torch.Tensor)), None)
        if grad is None:  # no output took part in the loss
            return (None,) * len(ctx.like)
        return tuple(None if like is None else no_gradient(grad, qualname, *like) for like in ctx.like)

    torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)
