"""The Triton peer of evolve-bench: every configuration its kernels are autotuned over computes the
task, judged by the evaluator's own comparison at the task's awkward correctness sizes, on the CPU
under Triton's interpreter (in a process of its own: tests/triton_interpreted.py). Skips where
PyTorch or Triton is not installed (the test extra has neither)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

TASKS = ["vector_add", "reduce_sum", "softmax", "layernorm", "transpose", "sgemm", "hgemm", "bgemm"]
HERE = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def interpreted() -> dict[str, Any]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(HERE.parent)}
    out = subprocess.run([sys.executable, str(HERE / "triton_interpreted.py"), *TASKS], env=env,
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", TASKS)
def test_every_configuration_computes_the_task(interpreted: dict[str, Any], name: str) -> None:
    result = interpreted[name]
    assert result["problems"] == []
    assert len(result["sizes"]) >= 3 and result["configs"] >= 6


def test_the_sizes_reach_the_multi_block_paths(interpreted: dict[str, Any]) -> None:
    """Rows wider than a block (softmax's and layernorm's loops over column blocks), GEMMs with K
    not a multiple of any tile and more than one tile along M, a reduction whose programs loop."""
    for name in ("softmax", "layernorm"):
        assert max(s["cols"] for s in interpreted[name]["sizes"]) > 8192
    assert any(s["K"] % 8 and s["M"] > 128 for s in interpreted["hgemm"]["sizes"])
    assert max(s["n"] for s in interpreted["reduce_sum"]["sizes"]) > 1024 * 1024  # > programs x BLOCK


def test_an_unknown_task_is_refused() -> None:
    from evolve.bench import triton_kernels

    with pytest.raises(KeyError, match="no Triton kernel for task 'histogram'"):
        triton_kernels.launch("histogram", {})
