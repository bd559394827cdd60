"""The KernelBench measurement on the GPU: ModelNew (a stand-in best.py until best.py's own lands),
eager and torch.compile checked and timed both ways, every timed output checked; a ModelNew honest
only while checked is caught by the timed checks; the section end to end with the evolve step
replaced (it needs an LLM)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from evolve.bench import kernelbench as kb
from evolve.bench import kernelbench_measure as km
from evolve.bench import kernelbench_report as kr
from evolve.paths import ROOT

pytestmark = pytest.mark.gpu
PROBLEMS = ROOT / "tests" / "kernelbench_problems"
MODELS = ROOT / "tests" / "kernelbench_models"
QUICK = {"rounds": 2, "warmup_ms": 1, "min_samples": 5, "max_samples": 10, "max_time_s": 0.3,
         "target_rel_iqr": 0.5}


def request(modes: list[str]) -> dict[str, Any]:
    return {"seeds": 3, "input_sets": 2, "compile_modes": modes, "timer": QUICK,
            "kb_timing": {"warmup": 3, "trials": 20}}


def run_dir(tmp_path: Path, best: str) -> Path:
    d = tmp_path / best
    d.mkdir()
    shutil.copy(MODELS / f"{best}.py", d / "best.py")
    return d


@pytest.mark.parametrize(("problem", "best"), [("level1/1_relu.py", "relu"),
                                               ("level2/1_linear_bias_relu.py", "linear")])
def test_modelnew_eager_and_compile_are_checked_and_timed_both_ways(tmp_path: Path, problem: str,
                                                                      best: str) -> None:
    out = km.measure(PROBLEMS / problem, run_dir(tmp_path, best), request(["default", "max-autotune"]))
    rows = out["impls"]
    assert list(rows) == ["ModelNew", "eager", "torch.compile (default)", "torch.compile (max-autotune)"]
    for name, row in rows.items():
        assert row["correct"], (name, row["reason"])
        assert row["ours"]["n"] >= 10 and row["ours"]["median_ms"] > 0
        assert row["ours"]["checked_calls"] == row["ours"]["n"] and row["ours"]["bad_calls"] == 0
        assert row["kernelbench"]["n"] == 20 and row["kernelbench"]["bad_calls"] == 0
    rec = kb.verdict(kb.Problem(PROBLEMS / problem, "level1"), _settings(tmp_path), kb.Outcome(0), out)
    assert rec["correct"] and kr.speedup(rec, "ours", "eager") and kr.speedup(rec, "kernelbench", "eager")


def test_a_modelnew_honest_only_while_checked_is_caught_in_the_timed_calls(tmp_path: Path) -> None:
    out = km.measure(PROBLEMS / "level1/1_relu.py", run_dir(tmp_path, "honest_while_checked"), request([]))
    new = out["impls"]["ModelNew"]
    assert new["correct"]  # the correctness seeds alone do not see it
    assert new["ours"]["bad_calls"] > 0  # the rotated, checked timed calls do
    p = kb.Problem(PROBLEMS / "level1/1_relu.py", "level1")
    rec = kb.verdict(p, _settings(tmp_path), kb.Outcome(0), out)
    assert not rec["correct"] and rec["stage"] == "timed"


def test_a_wrong_modelnew_is_not_timed(tmp_path: Path) -> None:
    out = km.measure(PROBLEMS / "level1/1_relu.py", run_dir(tmp_path, "identity"), request([]))
    assert not out["impls"]["ModelNew"]["correct"] and "ours" not in out["impls"]["ModelNew"]
    assert "outside tolerance" in out["impls"]["ModelNew"]["reason"]


def test_the_timers_after_hook_runs_once_per_timed_call() -> None:
    import cupy as cp

    from evolve.bench.timer import TimerSettings, time_side_by_side

    x = cp.ones(1 << 20, cp.float32)
    counts = {"a": 0, "b": 0}

    def hook(name: str) -> Any:
        return lambda: counts.__setitem__(name, counts[name] + 1)

    stats = time_side_by_side({"a": lambda: x * 2, "b": lambda: x + 1}, 50 << 20, TimerSettings(**QUICK),
                              after={"a": hook("a"), "b": hook("b")})
    assert counts == {"a": stats["a"].n, "b": stats["b"].n}


def _settings(tmp_path: Path) -> kb.Settings:
    return kb.Settings(problems=[str(PROBLEMS)], levels=["level1"], dir=str(tmp_path / "kb"), llm="auto",
                       n_trials=1, llm_calls=1, overrides=[], storage=None, seeds=3, input_sets=2,
                       compile_modes=["max-autotune"], kb_timing={"warmup": 3, "trials": 20}, timer=QUICK,
                       measure_timeout_s=600, evolve=True)


def test_the_section_measures_each_problem_in_its_own_process(tmp_path: Path) -> None:
    """The driver with its real measurement process; the evolve step is a stand-in that leaves a
    finished run's files (best.json and a best.py with ModelNew)."""
    s = _settings(tmp_path)
    problems = kb.find_problems([str(PROBLEMS / "level1/1_relu.py")], [])

    def finished(p: kb.Problem, s: kb.Settings) -> kb.Outcome:
        d = kb.run_dir(p, s)
        d.mkdir(parents=True)
        shutil.copy(MODELS / "relu.py", d / "best.py")
        (d / "best.json").write_text("{}")
        return kb.Outcome(0)

    (rec,) = kb.run_problems(problems, s, runner=finished)
    assert rec["correct"], rec["reason"]
    assert kr.speedup(rec, "ours", "torch.compile (max-autotune)") is not None
    assert (s.home / "results" / f"{problems[0].name}.json").is_file()
