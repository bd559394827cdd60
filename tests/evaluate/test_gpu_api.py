"""The GPU evaluator only calls CuPy APIs that exist (checked without a GPU)."""

import re

import pytest

from evolve.paths import PACKAGE_DIR


def test_every_cuda_name_the_evaluator_uses_exists() -> None:
    try:
        from cupy_backends.cuda.api import driver, runtime
    except ImportError:
        pytest.skip("CuPy not installed (pip install -e '.[test]')")
    src = "\n".join(p.read_text() for p in (PACKAGE_DIR / "evaluate").rglob("*.py"))
    for name, module in (("runtime", runtime), ("driver", driver)):
        used = set(re.findall(rf"\b{name}\.(\w+)", src))
        assert used, name
        missing = sorted(n for n in used if not hasattr(module, n))
        assert not missing, f"{name}: {missing}"
