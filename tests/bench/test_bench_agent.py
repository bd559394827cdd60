"""evolve-bench's agent section: what a model did in a run, read back from the record of a real run
(a loopback OpenAI-compatible server as the model, the replay backend as the GPU, real SQLite)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna

from evolve.bench.agent import summarize, table
from tests.helpers.llm import ANSWERS, BLOCK_ROW, RECORDED, REPAIR, llm_args, softmax_naive_only
from tests.helpers.openai_server import OpenAIServer, Reply, kernel_answer
from tests.helpers.runs import evolve


def test_a_runs_children_repairs_and_curve_are_counted(in_tmp: Path, llm_env: None) -> None:
    """Children: one that does not compile (its repair works), a fast one, a new kernel and a wrong
    one, then repeats (duplicates: no kernel); the counts must match the record trial by trial."""
    new = iter([ANSWERS["broken_compile"], ANSWERS["warp_rows"], BLOCK_ROW, ANSWERS["broken_wrong"]])
    server = OpenAIServer(lambda r: Reply(kernel_answer(
        ANSWERS["block_three_pass"] if REPAIR in r.prompt else next(new, ANSWERS["warp_rows"]))))
    with server:
        evolve(*softmax_naive_only("ag", 30), *llm_args(server, "llm.max_calls=6"),
               f"backend.recordings=[{RECORDED}]")
        calls = len(server.requests)
    s = summarize(Path("runs/ag"), "sqlite:///runs/evolve.db", "runs/artifacts")
    study = optuna.load_study(study_name="ag", storage="sqlite:///runs/evolve.db")
    first = {}
    for t in sorted(study.trials, key=lambda t: t.number):
        if t.user_attrs.get("status") and t.user_attrs["variant"] not in first:
            first[t.user_attrs["variant"]] = t.user_attrs
    kids = [a for a in first.values() if a["operator"] in ("mutate", "mutate_diff", "crossover", "write")]
    repairs = [a for a in first.values() if a["operator"] == "repair"]
    assert s.calls == calls == 6 and s.children == len(kids) and s.repairs == len(repairs) >= 1
    assert s.compiled == sum(a["status"] not in ("compile_error", "not_recorded") for a in kids) < s.children
    assert s.passed == sum(a["status"] == "ok" for a in kids)
    assert s.passed < s.passed_after_repair <= s.children  # the broken child's repair passed
    assert s.repairs_ok >= 1 and s.tokens_per_call > 0 and s.no_kernel == 6 - s.children - s.repairs
    xs, ys = zip(*s.curve, strict=True)
    assert list(xs) == sorted(xs) and xs[-1] <= calls and list(ys) == sorted(ys, reverse=True)
    assert ys[-1] == s.best_ms == study.best_value and s.seed_ms is not None and s.seed_ms >= s.best_ms
    assert "| softmax | 6 |" in table([s])


def test_the_agent_section_writes_its_table_and_plot_and_needs_runs(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "evolve.bench", "sections=[agent]", f"out={tmp_path}"],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "needs agent.runs" in out.stderr.strip().splitlines()[-1]


def test_a_child_the_replay_never_compiled_is_not_counted_compiled(in_tmp: Path, llm_env: None) -> None:
    """Issue 28.12: 'compiled 1 (100%)' was said of a replayed child with no recorded measurement."""
    with OpenAIServer(lambda r: Reply(kernel_answer(ANSWERS["warp_rows"]))) as server:
        evolve(*softmax_naive_only("nr", 4), *llm_args(server, "llm.max_calls=1", "evolution.repair=false"))
    s = summarize(Path("runs/nr"), "sqlite:///runs/evolve.db", "runs/artifacts")
    study = optuna.load_study(study_name="nr", storage="sqlite:///runs/evolve.db")
    kids = [t for t in study.trials if t.user_attrs.get("operator") in ("mutate", "mutate_diff", "crossover")]
    assert kids and {t.user_attrs["status"] for t in kids} == {"not_recorded"}
    assert s.children == 1 and s.compiled == 0
