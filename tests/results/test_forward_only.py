"""A tuned kernel's custom op has a forward only: torch.compile of a graph whose inputs require
gradients must still compile (AOTAutograd traces the backward), and a backward that really runs
must fail in one line instead of dropping the gradient."""

from __future__ import annotations

from itertools import count

import pytest

torch = pytest.importorskip("torch")

from evolve.results.forward_only import forward_only  # noqa: E402

_names = count()


def _op(with_formula: bool):
    """A functional CPU custom op standing in for a kernel's (which needs CUDA)."""
    name = f"cuda_evolve_test::scaled_{next(_names)}"
    op = torch.library.custom_op(name, lambda x, k: x * k, mutates_args=(),
                                 schema="(Tensor x, int k) -> Tensor", device_types="cpu")
    op.register_fake(lambda x, k: torch.empty_like(x))
    if with_formula:
        forward_only(name)
    return op


def _block(op):
    lin = torch.nn.Linear(8, 8)  # its parameters require gradients: the op's input does too
    return lin, lambda x: op(torch.relu(lin(x)), 3) + 1


def test_without_a_formula_compile_fails_in_grad_mode() -> None:
    _, f = _block(_op(with_formula=False))
    with pytest.raises(Exception, match="no autograd formula"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(torch.randn(4, 8))


@pytest.mark.parametrize("compiled", [False, True])
def test_a_forward_only_op_runs_in_grad_mode_and_refuses_a_backward(compiled: bool) -> None:
    op = _op(with_formula=True)
    lin, f = _block(op)
    x = torch.randn(4, 8)
    run = torch.compile(f, fullgraph=True, backend="aot_eager") if compiled else f
    y = run(x)
    torch.testing.assert_close(y, torch.relu(lin(x)) * 3 + 1)
    with pytest.raises(RuntimeError, match=r"has no backward: a cuda-evolve kernel computes the forward"):
        y.sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(run(x), torch.relu(lin(x)) * 3 + 1)
