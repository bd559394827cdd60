"""The choice of best.py's launcher (evolve/results/native) without a GPU: the ctypes path where
the native one is switched off or PyTorch has no CUDA, and the launcher's sizes, one per size name.
The launcher itself is built and run by tests/gpu/test_gpu_native.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from evolve.results import native
from evolve.results.fastcall import TorchPath
from evolve.results.native import NativePath, torch_path
from tests.helpers.tasks import task


@pytest.fixture
def fresh():
    native.extension.cache_clear()
    yield
    native.extension.cache_clear()


def test_switched_off_or_without_cuda_calls_take_the_ctypes_path(fresh, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    torch = pytest.importorskip("torch")
    t = task("layernorm")
    monkeypatch.setenv(native.ENV, "python")
    assert native.extension() is None
    assert isinstance(torch_path(t, lambda device, sizes: None, lambda values: None), TorchPath)
    native.extension.cache_clear()
    monkeypatch.setenv(native.ENV, "native")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert native.extension() is None  # nothing to launch on: not even a build is tried


def test_the_launcher_s_sizes_are_one_per_size_name_and_unknown_ones_are_refused() -> None:
    pytest.importorskip("torch")
    made = []
    ext = SimpleNamespace(Launcher=lambda *args: made.append(args) or SimpleNamespace(run=None, cached=0))
    path = NativePath(ext, task("layernorm"), lambda device, sizes: None, lambda values: None)
    n_args, first, describe, cap = made[0]
    assert (n_args, first, cap) == (4, 0, 256) and describe == path._describe
    assert path.size_values({"cols": 7}) == (-1, 7) and path.size_values({"rows": 3, "cols": 7}) == (3, 7)
    with pytest.raises(ValueError, match=r"unknown size\(s\) \['colz'\]; the sizes are rows, cols"):
        path.size_values({"colz": 7})


def test_the_launcher_source_travels_in_the_package() -> None:
    assert native.SOURCE.is_file() and native.SOURCE.suffix == ".cpp"
    text = (Path(native.__file__).parents[3] / "pyproject.toml").read_text()
    assert '"results/native/*.cpp"' in text
