"""best.py's native launcher on the GPU (evolve/results/native): built by torch.utils.cpp_extension,
the same results as the ctypes path it replaces for one-kernel and two-kernel plans, its custom op
kernels registered in C++ (CUDA and autograd), one-line errors through either way in, a backward
refused, a compiled call in grad mode, and the ctypes path where it is switched off."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from evolve.results import native
from evolve.results.fastcall import TorchPath
from tests.helpers.runs import import_file, write_best
from tests.helpers.tasks import task


@pytest.fixture(scope="module")
def ext():
    pytest.importorskip("torch")
    if shutil.which("ninja") is None and importlib.util.find_spec("ninja") is None:
        pytest.skip("ninja is not installed: the native launcher cannot be built (best.py takes ctypes)")
    built = native.extension()
    assert built is not None, "the native launcher did not build (see the log's warning)"
    return built


def test_both_launchers_give_the_same_outputs(tmp_path: Path, ext) -> None:
    import torch

    best = import_file(write_best(task("reduce_sum"), tmp_path / "r", seed=1), "gpu_native_sum")
    ln = import_file(write_best(task("layernorm"), tmp_path / "ln"), "gpu_native_ln")
    assert isinstance(best.kernel.torch_path(), native.NativePath)
    ctypes_sum, ctypes_ln = TorchPath(best.kernel.task, best.kernel._prepare), TorchPath(ln.kernel.task,
                                                                                          ln.kernel._prepare)
    for n in (1, 4099, 1_000_003):  # two kernels and their scratch
        x = torch.rand(n, device="cuda") + 1
        got = best.reduce_sum(x)
        want = ctypes_sum([x, None], {}, best.kernel._refuse)[1]
        assert torch.equal(got, want), n
        torch.testing.assert_close(got[0].double(), x.double().sum(), rtol=1e-4, atol=0)
    for rows, cols in ((1, 1), (33, 4096), (5, 20000)):
        x = torch.randn(rows, cols, device="cuda") * 3 + 1
        g, b = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
        got = ln.layernorm(x, g, b)
        assert torch.equal(got, ctypes_ln([x, g, b, None], {}, ln.kernel._refuse)[3])
        into = torch.full_like(x, float("nan"))
        assert ln.layernorm(x, g, b, y=into) is into and torch.equal(into, got)
    # per shape, and for layernorm also per way of giving y (allocated, or written into)
    assert best.kernel.torch_path().cached == 3 and ln.kernel.torch_path().cached == 6


def test_the_custom_op_s_kernels_are_the_launcher_s(tmp_path: Path, ext) -> None:
    import torch

    ln = import_file(write_best(task("layernorm"), tmp_path / "ln"), "gpu_native_ln_op")
    op = ln.register_torch_op("evolve_native_test")
    table = torch._C._dispatch_dump("evolve_native_test::layernorm")
    cuda = next(line for line in table.splitlines() if line.startswith("CUDA"))
    grad = next(line for line in table.splitlines() if line.startswith("Autograd"))
    assert "launcher.cpp" in cuda and "launcher.cpp" in grad, table
    x = torch.randn(64, 512, device="cuda")
    g, b = torch.randn(512, device="cuda"), torch.randn(512, device="cuda")
    want = torch.nn.functional.layer_norm(x, (512,), g, b, eps=1e-5)
    torch.testing.assert_close(op(x, g, b), want, atol=1e-4, rtol=1e-4)
    with pytest.raises(TypeError, match="x must be float32, got float64"):
        op(x.double(), g, b)
    with pytest.raises(ValueError, match="gamma has cols = 5"):
        op(x, g[:5], b)
    with pytest.raises(ValueError, match="a tensor on cpu cannot be launched on"):
        op(x.cpu(), g.cpu(), b.cpu())
    wants_grad = x.clone().requires_grad_()
    y = op(wants_grad, g, b)  # recorded: the forward, with a backward that refuses
    torch.testing.assert_close(y.detach(), want, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="has no backward"):
        y.sum().backward()
    compiled = torch.compile(lambda v: op(v * 2, g, b) + 1, fullgraph=True)  # in grad mode, traced
    torch.testing.assert_close(compiled(wants_grad).detach(), op(x * 2, g, b) + 1)


def test_an_inout_op_and_sizes_given_by_keyword(tmp_path: Path, ext) -> None:
    import torch

    from tests.gpu.test_gpu_usage import own

    best = import_file(write_best(own("histogram"), tmp_path / "h"), "gpu_native_hist")
    op = best.register_torch_op("evolve_native_hist")
    values = torch.randint(0, 300, (1_000_003,), device="cuda", dtype=torch.int32)
    counts = torch.zeros(300, device="cuda", dtype=torch.int32)
    op(values, counts)
    assert torch.equal(counts, torch.bincount(values, minlength=300).to(torch.int32))
    with pytest.raises(ValueError, match="unknown size"):
        best.kernel.torch_path()([values, counts], {"nope": 3})


def test_switched_off_calls_take_the_ctypes_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 ext) -> None:
    import torch

    monkeypatch.setenv(native.ENV, "python")
    native.extension.cache_clear()
    try:
        ln = import_file(write_best(task("layernorm"), tmp_path / "ln"), "gpu_native_off")
        x, g = torch.randn(4, 6, device="cuda"), torch.randn(6, device="cuda")
        ln.layernorm(x, g, g)
        assert isinstance(ln.kernel.torch_path(), TorchPath)
    finally:
        native.extension.cache_clear()
