"""The "Your own task" walk-through of the docs (docs/own-task.md), run as written: its bash blocks, in
order, in an empty folder. On any machine the steps up to the check (and the output the page shows for
it); with a GPU (pytest -m gpu) all of them: the tuning run and the PyTorch model that uses the result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evolve import dtypes
from evolve.paths import ROOT
from evolve.task.correctness import compare_all
from evolve.task.files import read_task_file
from evolve.task.task import load_task

GPU_MARK = "# on a machine with an NVIDIA GPU"


PAGE = ROOT / "docs" / "own-task.md"


def section() -> str:
    """The walk-through: its heading up to the page's next section, or the end of the page."""
    text = PAGE.read_text()
    start = text.index("\n## From an empty folder to PyTorch\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def blocks(language: str) -> list[str]:
    """The section's fenced blocks in one language ("" for plain ones), in order."""
    found, current, lang = [], None, ""
    for line in section().splitlines(keepends=True):
        if line.startswith("```") and current is None:
            current, lang = [], line[3:].strip()
        elif line.startswith("```"):
            if lang == language:
                found.append("".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return found


def bash(script: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVOLVE_LLM_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_walkthrough_has_its_steps() -> None:
    steps = blocks("bash")
    assert len(steps) == 6 and [GPU_MARK in s for s in steps] == [False] * 4 + [True] * 2


def test_the_steps_up_to_the_check_work_on_any_machine(tmp_path: Path) -> None:
    cpu = [s for s in blocks("bash") if GPU_MARK not in s]
    out = bash("\n".join(cpu), tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^  swiglu +my_ops/swiglu\.yaml +1 seed$", out.stdout, re.M), out.stdout
    shown = blocks("")[0].strip().splitlines()  # the output the page shows for the check
    assert out.stdout.strip().splitlines()[-len(shown):] == shown


def test_the_walkthrough_task_passes_a_kernel_that_rounds_once(tmp_path: Path) -> None:
    """bfloat16's default tolerance fits what the seed computes (fp32 inside, one rounding)."""
    files = [s for s in blocks("bash") if not re.search(r"^(evolve|python) ", s, re.M)]
    assert len(files) == 3
    assert bash("\n".join(files), tmp_path, timeout=60).returncode == 0
    t = load_task(read_task_file(tmp_path / "my_ops" / "swiglu.yaml"))
    for i, sizes in enumerate(t.correctness_sizes):
        x = t.make_inputs(np, sizes, i)
        g, u = (dtypes.widen(np, x[k], "bfloat16").astype(np.float32) for k in ("g", "u"))
        y = dtypes.store(g / (np.float32(1) + np.exp(-g)) * u, "bfloat16")
        assert compare_all(np, t, {"y": y}, t.expected(np, x, sizes), {"y": 0}) is None


@pytest.mark.gpu
def test_every_step_works_on_the_gpu(tmp_path: Path) -> None:
    out = bash("\n".join(blocks("bash")), tmp_path, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "swiglu: best " in out.stdout and "GB/s = " in out.stdout
    assert "the tuned swiglu gives the model's output: (8, 512, 1024)" in out.stdout
    assert (tmp_path / "runs" / "swiglu" / "best.py").is_file()
