"""evolution.profile: Nsight Compute's figures read from its real CSV, kept per variant in the
study, and shown with the parent in prompts; the run end to end on recorded measurements that
carry a profile (the replay backend), with a real OpenAI-protocol server on loopback."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest

from evolve.errors import EvolveError
from evolve.evaluate import profile
from evolve.evaluate.recording import builtin_path
from evolve.evolution.llm.log import read
from evolve.evolution.prompts import KernelView, Prompts
from evolve.hardware import named
from evolve.kernel.spec import Variant
from evolve.paths import KERNELS_DIR
from evolve.search import profiler
from tests.evolution.test_evolution import softmax_naive_only
from tests.helpers.llm import BLOCK_ROW, llm_args
from tests.helpers.openai_server import OpenAIServer, Reply, kernel_answer
from tests.helpers.runs import evolve, study
from tests.helpers.tasks import hardware_config, task

CSV = (Path(__file__).parents[1] / "profiles/ncu_saxpy_h200.csv").read_text()


def test_ncus_csv_is_read_past_its_own_lines_and_the_programs_output() -> None:
    rows = profile.parse_csv(CSV)
    assert len(rows) == 1 and rows[0]["Kernel Name"] == "saxpy"
    p = profile.summarize(rows)
    assert p["kernels"] == 1 and p["time_ns"] == 81184
    assert p["dram_read_bytes"] == 134223616  # 64 MiB of x read once, thousands separators gone
    assert p["shared_load_conflicts"] == 574841
    assert p["memory_pct"] == pytest.approx(46.88) and p["occupancy_pct"] == pytest.approx(83.43)
    assert p["stalls"]["long_scoreboard"] == pytest.approx(56.72)
    assert "tensor_pipe_pct" not in p  # not asked for in that run: left out, not zero


def test_several_kernels_sum_their_counts_and_weight_their_rates_by_time() -> None:
    a = {profile.TIME: "1,000", profile.COUNTS["dram_read_bytes"]: "100",
         profile.THROUGHPUT["dram_pct"]: "90", profile.stall_metric("barrier"): "1"}
    b = {profile.TIME: "3,000", profile.COUNTS["dram_read_bytes"]: "50",
         profile.THROUGHPUT["dram_pct"]: "10", profile.stall_metric("barrier"): "5"}
    p = profile.summarize([a, b])
    assert p["dram_read_bytes"] == 150 and p["time_ns"] == 4000
    assert p["dram_pct"] == pytest.approx(30.0) and p["stalls"]["barrier"] == pytest.approx(4.0)


def test_nothing_to_read_is_no_profile() -> None:
    assert profile.parse_csv("==PROF== No kernels were profiled.\n") == []
    assert profile.summarize([]) == {}
    assert profile.describe({}) == "" and profile.describe({"error": "ncu took too long"}) == ""


def _prompt(view: KernelView) -> str:
    return Prompts(task("softmax"), named(hardware_config("h200")), includes=()).mutate(
        view, [], [], diff=False)[1]["content"]


def test_the_prompt_shows_what_limits_the_parent() -> None:
    p = profile.summarize(profile.parse_csv(CSV))
    view = KernelView("naive", "/* k */\n", {"BLOCK": 256}, 0.08, 2000.0, 0.45,
                      profile={**p, "tunables": {"BLOCK": 128}, "ms": 0.09})
    text = _prompt(view)
    assert "Nsight Compute profile at BLOCK=128 (0.09 ms)" in text  # taken at other tunables: says so
    assert "long_scoreboard 56.72 (waiting for global/local memory" in text  # the top stall first
    assert "loads 574,841 conflicts" in text
    same = KernelView("naive", "/* k */\n", {"BLOCK": 128}, 0.08, 2000.0, 0.45,
                      profile={**p, "tunables": {"BLOCK": 128}, "ms": 0.08})
    text = _prompt(same)
    assert "Nsight Compute profile (1 kernel" in text
    plain = KernelView("naive", "/* k */\n", {"BLOCK": 128}, 0.08, 2000.0, 0.45)
    assert "Nsight" not in _prompt(plain)


class Backend:
    """Logic only: what a backend's ``profile`` answers, scripted."""

    def __init__(self, answers: list[Any]):
        self.answers, self.asked = answers, []

    def profile(self, variant: Variant, tunables: Mapping[str, int],
                sizes: Mapping[str, int]) -> dict[str, Any] | None:
        self.asked.append(dict(tunables))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _variant() -> Variant:
    return Variant.parse((KERNELS_DIR / "softmax/naive.cu").read_text())


def test_a_member_is_profiled_at_its_best_and_again_only_once_clearly_faster(tmp_path: Path) -> None:
    s = optuna.create_study(storage=f"sqlite:///{tmp_path}/p.db")
    b = Backend([{"dram_pct": 50.0}, {"dram_pct": 80.0}])
    pr = profiler.Profiler(s, b, {"rows": 1})
    v = _variant()
    assert pr.after(0, v, {"B": 1}, 1.0, None) == {"dram_pct": 50.0}  # first correct: profiled
    assert pr.after(1, v, {"B": 2}, 1.2, 1.0) is None  # slower than its best: not
    assert pr.after(2, v, {"B": 3}, 0.95, 1.0) is None  # faster, but within 10%: not again
    assert pr.after(3, v, {"B": 4}, 0.85, 0.95) == {"dram_pct": 80.0}  # 15% faster: again
    assert b.asked == [{"B": 1}, {"B": 4}]
    kept = optuna.load_study(study_name=s.study_name, storage=f"sqlite:///{tmp_path}/p.db")
    assert profiler.recorded(kept)[v.id] == {"trial": 3, "tunables": {"B": 4}, "ms": 0.85, "dram_pct": 80.0}


def test_a_resumed_run_profiles_the_members_that_have_none(tmp_path: Path) -> None:
    s = optuna.create_study()
    b = Backend([{"dram_pct": 1.0}])
    v = _variant()
    profiler.Profiler(s, b, {}).backfill([(7, v, {"B": 2}, 0.5)])
    profiler.Profiler(s, b, {}).backfill([(7, v, {"B": 2}, 0.5)])  # a second resume: nothing to do
    assert b.asked == [{"B": 2}] and profiler.recorded(s)[v.id]["trial"] == 7


def test_a_candidate_that_cannot_be_profiled_is_recorded_with_why_and_not_retried() -> None:
    s = optuna.create_study()
    b = Backend([{"error": "ncu took longer than 180 s"}])
    pr = profiler.Profiler(s, b, {})
    v = _variant()
    pr.after(0, v, {"B": 1}, 1.0, None)
    assert pr.after(1, v, {"B": 2}, 0.99, 1.0) is None and len(b.asked) == 1
    assert profiler.recorded(s)[v.id]["error"].startswith("ncu took longer")


def test_no_profiler_here_turns_profiling_off_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    s = optuna.create_study()
    b = Backend([EvolveError("ncu cannot read this GPU's performance counters: ERR_NVGPUCTRPERM")])
    pr = profiler.Profiler(s, b, {})
    v = _variant()
    with caplog.at_level(logging.WARNING):
        assert pr.after(0, v, {"B": 1}, 1.0, None) is None
        assert pr.after(1, v, {"B": 1}, 0.5, 1.0) is None
    assert len(b.asked) == 1 and not pr.on
    assert [r.message for r in caplog.records if r.levelno == logging.WARNING] == [
        "evolution.profile is off for this run: ncu cannot read this GPU's performance counters: "
        "ERR_NVGPUCTRPERM"]


def _recording_with_profiles(path: Path, p: dict[str, Any]) -> Path:
    """The built-in softmax recording's lines of the naive seed, each with a profile."""
    lines = []
    for line in builtin_path("h200", "softmax").read_text().splitlines():
        d = json.loads(line)
        if d.get("kind") == "measurement" and d.get("name") == "naive":
            d["measurement"]["profile"] = p
            lines.append(json.dumps(d))
    assert lines
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("on", [True, False])
def test_with_profile_on_the_parents_prompt_carries_its_profile(in_tmp: Path, llm_env: None,
                                                                on: bool) -> None:
    p = profile.summarize(profile.parse_csv(CSV))
    rec = _recording_with_profiles(in_tmp / "profiled.jsonl", p)
    with OpenAIServer(lambda r: Reply(kernel_answer(BLOCK_ROW))) as server:
        evolve(*softmax_naive_only("pr", 8), *llm_args(server, "llm.max_calls=1"),
               f"backend.recordings=[{rec}]", f"evolution.profile={str(on).lower()}")
    call = next(x for x in read(in_tmp / "runs/pr/llm.jsonl") if x["kind"] == "call")
    prompt = call["messages"][1]["content"]
    recorded = profiler.recorded(study("pr"))
    if not on:
        assert "Nsight Compute" not in prompt and not recorded
        return
    assert "Nsight Compute profile" in prompt and "long_scoreboard 56.72" in prompt
    seed = next(iter(recorded.values()))
    assert seed["dram_read_bytes"] == p["dram_read_bytes"] and seed["tunables"] and seed["ms"] > 0
    best = min((t for t in study("pr").trials if t.value is not None and t.number <= seed["trial"]),
               key=lambda t: t.value)
    assert best.number == seed["trial"]  # taken at the seed's best configuration when it was profiled
