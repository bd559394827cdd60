"""``evolve-bench sections=[kernelbench]`` on this CPU machine: finding problem files, the section's
settings and its one-line errors (through the real command), the driver's resumability (the
``evolve`` subprocess replaced by an injected runner for that logic only; its own failure line
read from a real ``evolve`` process), the figures on made-up records, the escaped report, and the
measurement's checking on the CPU with PyTorch (problem files written here, in KernelBench's
format; stand-ins for the run's ``best.py`` written by each test). GPU timing: test_kernelbench_gpu.py."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from evolve.bench import kernelbench as kb
from evolve.bench import kernelbench_report as kr
from evolve.errors import EvolveError
from evolve.paths import BENCH_CONF_DIR, ROOT

PROBLEMS = ROOT / "tests" / "kernelbench_problems"


def settings(tmp_path: Path, **changes: Any) -> kb.Settings:
    """The section's settings as bench.yaml declares them (its timer is the speed section's)."""
    conf = yaml.safe_load((BENCH_CONF_DIR / "bench.yaml").read_text())
    c = {**conf["kernelbench"], "timer": conf["speed"]["timer"], "problems": [str(PROBLEMS)],
         "dir": str(tmp_path / "kb"), **changes}
    return kb.Settings.from_config(c)


# ---- finding problems -------------------------------------------------------------------------

def test_a_checkout_gives_its_levels_in_kernelbenchs_order(tmp_path: Path) -> None:
    found = kb.find_problems([str(PROBLEMS)], ["level1", "level2"])
    assert [(p.level, p.path.name) for p in found] == [
        ("level1", "1_relu.py"), ("level1", "2_row_sum.py"), ("level1", "10_scale.py"),
        ("level2", "1_linear_bias_relu.py")]
    assert found[0].name == "kb-level1-1_relu"
    assert [p.level for p in kb.find_problems([str(PROBLEMS)], ["level2"])] == ["level2"]
    # a checkout's root holds its problems under KernelBench/
    (tmp_path / "KernelBench").symlink_to(PROBLEMS, target_is_directory=True)
    assert len(kb.find_problems([str(tmp_path)], ["level1"])) == 3


def test_one_level_folder_or_files(tmp_path: Path) -> None:
    level = kb.find_problems([str(PROBLEMS / "level2")], ["level1"])
    assert [(p.level, p.path.name) for p in level] == [("level2", "1_linear_bias_relu.py")]
    files = kb.find_problems([str(PROBLEMS / "level1/2_row_sum.py"), str(PROBLEMS / "level2")], [])
    assert [p.name for p in files] == ["kb-level1-2_row_sum", "kb-level2-1_linear_bias_relu"]


def test_problem_folders_that_cannot_work_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(EvolveError, match=r"kernelbench.problems: .*nowhere does not exist"):
        kb.find_problems([str(tmp_path / "nowhere")], ["level1"])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no problems here")
    with pytest.raises(EvolveError, match=r"no problem files \(\*\.py\) in .*empty"):
        kb.find_problems([str(tmp_path / "empty")], ["level1"])
    with pytest.raises(EvolveError, match="share the run name kb-level1-1_relu"):
        kb.find_problems([str(PROBLEMS / "level1/1_relu.py"), str(PROBLEMS / "level1")], [])
    odd = tmp_path / "level1"
    odd.mkdir()
    (odd / "1_relu,sweep.py").write_text((PROBLEMS / "level1/1_relu.py").read_text())
    with pytest.raises(EvolveError, match="passed to evolve safely"):  # a comma would make a sweep
        kb.find_problems([str(odd)], [])


# ---- settings and the command's one-line errors -------------------------------------------------

def test_settings_are_checked_before_anything_runs(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert s.n_trials >= 1 and s.compile_modes == ["default", "max-autotune"]
    assert s.kb_timing == {"warmup": 3, "trials": 100}
    for change, message in (({"problems": []}, "needs kernelbench.problems"),
                            ({"n_trials": 0}, "n_trials must be a positive integer"),
                            ({"input_sets": 9}, "cannot exceed kernelbench.seeds"),
                            ({"compile_modes": ["fastest"]}, "unknown \\['fastest'\\]"),
                            ({"llm": "none"}, "llm=none cannot work"),
                            ({"kb_timing": {"warmup": 3}}, "kb_timing needs warmup and trials"),
                            ({"timer": {"rounds": 1, "samples": 5}}, "kernelbench.timer: .*'samples'")):
        with pytest.raises(EvolveError, match=message):
            settings(tmp_path, **change)
    with pytest.raises(EvolveError, match=r"unknown setting\(s\) \['budget'\]"):
        kb.Settings.from_config({**s.__dict__, "budget": 5})


def _bench(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evolve.bench", "sections=[kernelbench]",
                           f"out={tmp_path}/out", f"kernelbench.dir={tmp_path}/kb", *overrides],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_command_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    """Through the real command, before the GPU is looked for (this machine has none)."""
    (tmp_path / "empty").mkdir()
    for overrides, message in (
            ((), "needs kernelbench.problems"),
            ((f"kernelbench.problems=[{tmp_path}/missing]",), "missing does not exist"),
            ((f"kernelbench.problems=[{tmp_path}/empty]",), "no problem files (*.py) in"),
            ((f"kernelbench.problems=[{PROBLEMS}]", "kernelbench.n_trials=0"), "positive integer")):
        out = _bench(tmp_path, *overrides)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and message in out.stderr and "Traceback" not in out.stderr


# ---- the driver: resumable per problem ----------------------------------------------------------

def measurement(new_ms: float, eager_ms: float, compiled_ms: float, correct: bool = True) -> dict[str, Any]:
    def row(ms: float, ok: bool = True) -> dict[str, Any]:
        return {"correct": ok, "reason": None if ok else "seed 0: output 0: 8000 of 8000 elements outside",
                "ours": {"median_ms": ms, "iqr_ms": 0.001, "n": 30, "bad_calls": 0, "checked_calls": 30},
                "kernelbench": {"mean_ms": 1.5 * ms, "std_ms": 0.01, "n": 100, "bad_calls": 0,
                                "first_bad": None}}

    return {"impls": {"ModelNew": row(new_ms, correct), "eager": row(eager_ms),
                      "torch.compile (max-autotune)": row(compiled_ms)}, "device": "test"}


class Recorder:
    """Stands in for the evolve subprocess in the resumability test: what it was asked to run,
    and what each run does (finish with a best kernel, finish with none, fail, be interrupted)."""

    def __init__(self, plan: dict[str, str]) -> None:
        self.plan, self.calls, self.measured = plan, [], []

    def run(self, p: kb.Problem, s: kb.Settings) -> kb.Outcome:
        self.calls.append(kb.evolve_command(p, s))
        what = self.plan.get(p.name, "best")
        if what == "best":
            kb.run_dir(p, s).mkdir(parents=True, exist_ok=True)
            (kb.run_dir(p, s) / "best.json").write_text("{}")
        return kb.Outcome({"best": 0, "none": 0, "error": 2, "interrupt": 130}[what],
                          "evolve: task refused: training-mode dropout" if what == "error" else None)

    def measure(self, p: kb.Problem, s: kb.Settings) -> dict[str, Any]:
        self.measured.append(p.name)
        return measurement(1.0, 2.0, 1.5)


def test_a_second_invocation_skips_finished_problems_and_resumes_the_rest(tmp_path: Path) -> None:
    s = settings(tmp_path)
    problems = kb.find_problems(s.problems, s.levels)
    names = [p.name for p in problems]
    first = Recorder({names[1]: "error", names[2]: "interrupt"})
    got = []
    with pytest.raises(EvolveError, match=f"{names[2]} was interrupted; run the bench again to resume"):
        for rec in kb.run_problems(problems, s, first.run, first.measure):
            got.append(rec)
    assert [r["name"] for r in got] == names[:2] and got[0]["correct"] and got[1]["stage"] == "evolve"
    assert got[1]["reason"] == "evolve: task refused: training-mode dropout"
    assert first.measured == [names[0]]
    kept = json.loads((s.home / "results" / f"{names[0]}.json").read_text())
    assert kept == got[0]
    assert not (s.home / "results" / f"{names[1]}.json").exists()  # an evolve error is tried again

    second = Recorder({names[3]: "none"})
    again = list(kb.run_problems(problems, s, second.run, second.measure))
    assert [r["name"] for r in again] == names and again[0] == kept  # read back, not run
    ran = [next(a.split("=", 1)[1] for a in cmd if a.startswith("run.name=")) for cmd in second.calls]
    assert ran == names[1:]  # the unfinished ones, under the names they had: evolve resumes them
    assert second.measured == names[1:3]
    assert again[3]["stage"] == "search" and again[3]["reason"] == "evolve made no study"

    third = Recorder({})
    assert [r["name"] for r in kb.run_problems(problems, s, third.run, third.measure)] == names
    assert [c for c in third.calls] == []  # all finished


def test_with_evolve_false_the_runs_are_measured_as_they_stand(tmp_path: Path) -> None:
    """Runs evolved elsewhere (two-machine rounds): nothing is evolved; a run with a result is
    measured, one without is reported from its record."""
    s = settings(tmp_path, evolve=False)
    problems = kb.find_problems(s.problems, s.levels)[:2]
    done = kb.run_dir(problems[0], s)
    done.mkdir(parents=True)
    (done / "best.json").write_text("{}")
    measured: list[str] = []

    def measure(p: kb.Problem, _: kb.Settings) -> dict:
        measured.append(p.name)
        return {"error": "measured here"}

    recs = list(kb.run_problems(problems, s, measurer=measure))
    assert measured == [problems[0].name] and recs[0]["reason"] == "measured here"
    assert recs[1]["stage"] == "search" and recs[1]["reason"] == "evolve made no study"
    assert not (s.home / "logs").exists()  # no evolve ran


def test_the_evolve_command_carries_the_budget_and_the_problem(tmp_path: Path) -> None:
    s = settings(tmp_path, llm="openai", n_trials=40, llm_calls=12, overrides=["llm.model=gpt-5"])
    p = kb.find_problems([str(PROBLEMS / "level1/1_relu.py")], [])[0]
    cmd = kb.evolve_command(p, s)
    assert cmd[1:3] == ["-m", "evolve"] and f"task={p.path}" in cmd and "run.name=kb-level1-1_relu" in cmd
    assert {"llm=openai", "search.n_trials=40", "llm.max_calls=12", "search.progress=false"} <= set(cmd)
    assert f"run.dir={s.home}/kb-level1-1_relu" in cmd and f"storage.url=sqlite:///{s.home}/evolve.db" in cmd
    assert cmd[-1] == "llm.model=gpt-5"  # the user's overrides come last


def test_a_failed_evolve_is_reported_with_its_own_line(tmp_path: Path) -> None:
    """A real ``evolve`` process that refuses its command: the reason is its one-line error."""
    s = settings(tmp_path, overrides=["search.no_such_setting=1"])
    p = kb.find_problems([str(PROBLEMS / "level1/1_relu.py")], [])[0]
    out = kb.run_evolve(p, s)
    assert out.rc == 2 and out.reason is not None and out.reason.startswith("evolve: ")
    assert "\n" not in out.reason and (s.home / "logs" / f"{p.name}.log").is_file()


def test_a_run_without_a_correct_candidate_says_why_from_its_record(tmp_path: Path) -> None:
    """Its study (real SQLite) holds failed trials as the search records them."""
    s = settings(tmp_path)
    p = kb.find_problems([str(PROBLEMS / "level1/1_relu.py")], [])[0]
    s.home.mkdir(parents=True)
    study = optuna.create_study(study_name=p.name, storage=kb.storage_url(s))
    for status, reason in (("compile_error", "line 3: expected ';'"), ("wrong", "y: 10 of 8000 elements"),
                           ("wrong", "y: relative L2 error 0.3 exceeds 1e-05")):
        t = study.ask()
        t.set_user_attr("status", status)
        t.set_user_attr("reason", reason)
        study.tell(t, state=optuna.trial.TrialState.FAIL)
    assert kb.search_reason(p, s) == ("no correct candidate (wrong 2, compile_error 1); "
                                      "last: wrong: y: relative L2 error 0.3 exceeds 1e-05")


def test_a_measurement_that_cannot_run_fails_its_problem_with_the_reason(tmp_path: Path) -> None:
    """The real measurement process on this machine: no CUDA, so the problem fails at the stage
    'measure' with the error, and is tried again next time; a process that died is a verdict."""
    s = settings(tmp_path, measure_timeout_s=300)
    p = kb.find_problems([str(PROBLEMS / "level1/1_relu.py")], [])[0]
    measured = kb.measure_in_process(p, s)
    assert set(measured) == {"error", "retry"} and measured["error"]
    rec = kb.verdict(p, s, kb.Outcome(0), measured)
    assert rec["stage"] == "measure" and not rec["correct"] and rec["reason"] == measured["error"]

    def finished(p: kb.Problem, s: kb.Settings) -> kb.Outcome:
        kb.run_dir(p, s).mkdir(parents=True, exist_ok=True)
        (kb.run_dir(p, s) / "best.json").write_text("{}")
        return kb.Outcome(0)

    (rec,) = kb.run_problems([p], s, finished, lambda p, s: measured)
    assert rec["stage"] == "measure" and not (s.home / "results" / f"{p.name}.json").exists()  # tried again
    died = {"error": "the measurement process died (exit -11): Segmentation fault"}
    (rec,) = kb.run_problems([p], s, finished, lambda p, s: died)
    assert rec["reason"] == died["error"] and (s.home / "results" / f"{p.name}.json").is_file()  # a verdict


def test_a_modelnew_wrong_in_timed_calls_is_not_correct(tmp_path: Path) -> None:
    s = settings(tmp_path)
    p = kb.find_problems([str(PROBLEMS / "level1/1_relu.py")], [])[0]
    m = measurement(1.0, 2.0, 1.5)
    m["impls"]["ModelNew"]["ours"]["bad_calls"] = 4
    rec = kb.verdict(p, s, kb.Outcome(0), m)
    assert not rec["correct"] and rec["stage"] == "timed" and "4 of the ours protocol's" in rec["reason"]
    assert kb.verdict(p, s, kb.Outcome(0), measurement(1.0, 2.0, 1.5))["correct"]


# ---- the figures --------------------------------------------------------------------------------

def record(level: str, name: str, m: dict[str, Any] | None, stage: str = "ok", reason: str | None = None
           ) -> dict[str, Any]:
    correct = m is not None and m["impls"]["ModelNew"]["correct"]
    return {"problem": f"/x/{level}/{name}.py", "level": level, "name": name, "correct": correct,
            "stage": stage if correct or m is None else "check", "reason": reason,
            "impls": m["impls"] if m else {}}


RECORDS = [
    record("level1", "a", measurement(1.0, 3.0, 1.2)),    # 3x eager, 1.2x compile
    record("level1", "b", measurement(2.0, 1.6, 1.0)),    # 0.8x, 0.5x
    record("level1", "c", measurement(1.0, 2.0, 2.0, correct=False)),
    record("level2", "d", measurement(0.5, 1.0, 1.0)),    # 2x, 2x
    record("level2", "e", None, "evolve", "evolve: refused"),
]


def test_fast_p_counts_correct_problems_faster_than_p_over_all_problems() -> None:
    level1 = [r for r in RECORDS if r["level"] == "level1"]
    assert [kr.fast_p(level1, "ours", "eager", p) for p in kr.PS] == [2 / 3, 1 / 3, 1 / 3, 1 / 3]
    compiled = "torch.compile (max-autotune)"
    assert [kr.fast_p(level1, "ours", compiled, p) for p in kr.PS] == [2 / 3, 1 / 3, 0, 0]
    assert kr.fast_p(RECORDS, "ours", "eager", 2.0) == 1 / 5  # d is exactly 2x: not more than 2
    assert kr.fast_p([], "ours", "eager", 1.0) == 0.0
    # KernelBench's times are the same ratios here (made up as 1.5x each side)
    assert kr.speedup(RECORDS[0], "kernelbench", "eager") == pytest.approx(3.0)
    assert kr.speedup(RECORDS[2], "ours", "eager") is None  # incorrect: no speed-up


def test_geomean_and_correctness_rate_per_level() -> None:
    s = kr.summary(RECORDS)
    assert list(s) == ["level1", "level2", "all"]
    assert (s["level1"]["correct"], s["level1"]["problems"]) == (2, 3)
    assert s["level1"]["correctness"] == pytest.approx(2 / 3) and s["level2"]["correctness"] == 0.5
    vs = s["level1"]["vs"]
    assert vs["eager"]["ours"]["geomean"] == pytest.approx(math.sqrt(3.0 * 0.8))
    assert vs["eager"]["ours"]["n"] == 2
    assert vs["torch.compile (max-autotune)"]["ours"]["geomean"] == pytest.approx(math.sqrt(1.2 * 0.5))
    assert s["all"]["vs"]["eager"]["ours"]["geomean"] == pytest.approx((3.0 * 0.8 * 2.0) ** (1 / 3))
    assert s["level1"]["vs"]["eager"]["ours"]["fast"]["1.5"] == pytest.approx(1 / 3)
    assert kr.geomean([]) is None and kr.correctness_rate([]) == 0.0


# ---- the report ---------------------------------------------------------------------------------

HOSTILE = "| <img src=x onerror=alert(1)> **bold** [link](http://x)\n# heading `code` $x$ \x1b[31m"


def test_the_report_renders_a_failure_reason_as_text(tmp_path: Path) -> None:
    from evolve.bench import report

    records = [*RECORDS, record("level2", "f|<b>", None, "evolve", HOSTILE)]
    section = {"settings": {"n_trials": 10, "llm_calls": 5, "llm": "auto", "seeds": 3},
               "problems": records, "summary": kr.summary(records)}
    md = report.markdown({"kernelbench": section, "environment": {}})
    assert "<img" not in md and "<b>" not in md and "&lt;img src=x onerror=alert(1)&gt;" in md
    assert "\\*\\*bold\\*\\*" in md and "\\[link\\](http://x)" in md and "\x1b" not in md
    failures = md[md.index("### Why each failure failed"):].splitlines()
    row = next(x for x in failures if "heading" in x)
    assert len(re.findall(r"(?<!\\)\|", row)) == 4  # three cells: no pipe of the text splits them
    assert not any(x.startswith("#") for x in md.splitlines() if "heading" in x)
    assert "### level1: 2 of 3 correct (67%)" in md and "| eager | this tool's" in md
    assert "kernelbench: 50% of 6 problems correct (>= 90) — NOT MET" in md
    report.write({"kernelbench": section, "environment": {}}, tmp_path)
    assert (tmp_path / "kernelbench.png").read_bytes()[:4] == b"\x89PNG"
    kept = json.loads((tmp_path / "results.json").read_text())["kernelbench"]["problems"][-1]
    assert kept["reason"] == HOSTILE  # the JSON keeps the text as it was


def test_the_report_names_the_problems_judged_at_pytorch_s_own_accuracy() -> None:
    from evolve.bench import report

    records = [*RECORDS[:1], {**RECORDS[1], "noise_floor": [{"elementwise": 1e-8, "l2": 1e-7}]}]
    md = report.markdown({"kernelbench": {"settings": {}, "problems": records,
                                          "summary": kr.summary(records)}, "environment": {}})
    line = next(x for x in md.splitlines() if x.startswith("Judged at PyTorch's own accuracy"))
    assert line.endswith(f"{kr.cell(Path(RECORDS[1]['problem']).name)}.")
    assert Path(RECORDS[0]["problem"]).name not in line


def test_cells_escape_markup_and_fold_lines() -> None:
    assert kr.cell("a|b\nc") == "a\\|b c"
    assert kr.cell("x" * 500, 10) == "x" * 9 + "…"
    assert kr.cell("<script>&") == "&lt;script&gt;&amp;"


def test_the_documented_command_parses_and_carries_its_overrides() -> None:
    """Hydra reads an unquoted ``[llm.model=gpt-5]`` as bad grammar: the command in the docs failed
    before anything ran. Its overrides must reach the section's settings as written."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    block = re.search(r"```bash\n.*?\n(evolve-bench sections=\[kernelbench\].*?)\n```", text, re.S)
    assert block, "docs/benchmarks.md lost its kernelbench command"
    import shlex

    argv = shlex.split(block.group(1).replace("\\\n", " "))[1:]
    out = subprocess.run([sys.executable, "-m", "evolve.bench", *argv, "--cfg", "job"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-800:]
    section = yaml.safe_load(out.stdout)["kernelbench"]
    assert section["overrides"] == ["llm.model=gpt-5"] and section["llm"] == "openai"
