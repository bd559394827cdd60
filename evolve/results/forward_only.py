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


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    import torch

    ctx.like = [(list(v.shape), v.dtype) if isinstance(v, torch.Tensor) else None for v in inputs]


def _backward(qualname: str) -> Any:
    """The formula's backward: no gradient where traced, the one-line error where run."""
    import torch

    no_gradient = _no_gradient()

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        grad = next((g for g in grads if isinstance(g, torch.Tensor)), None)
        if grad is None:  # no output took part in the loss
            return (None,) * len(ctx.like)
        return tuple(None if like is None else no_gradient(grad, qualname, *like) for like in ctx.like)

    return backward


def forward_only(qualname: str, lib: Any = None) -> None:
    """Give the functional custom op ``qualname`` (``namespace::name``; defined in ``lib``, a
    ``torch.library.Library``, or by ``torch.library.custom_op``) the formula above."""
    import torch

    torch.library.register_autograd(qualname, _backward(qualname), setup_context=_setup_context, lib=lib)


def recorded(qualname: str, op: Any) -> Any:
    """The formula where the native launcher is the op's autograd kernel and autograd records
    (:mod:`evolve.results.native`): ``op``'s forward (which, with grad mode off inside, goes
    straight to the launch) as a ``torch.autograd.Function`` with the backward above."""
    import torch

    class Recorded(torch.autograd.Function):
        setup_context = staticmethod(_setup_context)
        backward = staticmethod(_backward(qualname))

        @staticmethod
        def forward(*args: Any) -> Any:
            return op(*args)

    return Recorded.apply
