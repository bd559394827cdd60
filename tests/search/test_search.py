"""The search loop on the replay backend (recorded H200 measurements) with real SQLite storage."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from evolve.evaluate.recording import builtin_path
from evolve.paths import KERNELS_DIR, ROOT
from evolve.record.schema import fixed_params
from tests.helpers.runs import REPLAY, cli, evolve, finished, study
from tests.helpers.tasks import task


def _completed_trials(db: str) -> int:
    """Read-only, with SQLite itself: an Optuna storage opened while the run is still creating
    the database would race it to create the schema."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:  # no file or no table yet
        return 0


def recorded_space(task: str) -> int:
    return sum(1 for line in builtin_path("h200", task).read_text().splitlines()
               if json.loads(line)["kind"] == "measurement")


def test_run_spends_the_budget_and_exports(in_tmp: Path) -> None:
    best = evolve("task=softmax", "run.name=a", "search.n_trials=10", "search.seed=1")
    trials = finished("a")
    assert len(trials) == 10
    assert best == min(t.value for t in trials if t.state == TrialState.COMPLETE)
    ops = [t.user_attrs["operator"] for t in sorted(trials, key=lambda t: t.number)]
    assert ops[:2] == ["seed", "seed"] and set(ops[2:]) == {"tune"}
    out = json.loads((in_tmp / "runs/a/best.json").read_text())
    assert out["time_ms"] == best and out["speedup"] >= 1.0
    assert "#define" in (in_tmp / "runs/a/best.cu").read_text()
    assert "| variant |" in (in_tmp / "runs/a/report.md").read_text()
    keys = {(t.user_attrs["variant"], tuple(sorted(t.params.items()))) for t in trials}
    assert len(keys) == 10, "no candidate is measured twice"


def test_every_seed_is_measured_first_while_the_next_candidate_is_queued_ahead(in_tmp: Path) -> None:
    """The search queues a candidate ahead (to compile it while the GPU measures); the seeds'
    defaults still come first, in order."""
    evolve("task=sgemm", "run.name=ahead", "search.n_trials=6", "search.seed=0")
    trials = sorted(finished("ahead"), key=lambda t: t.number)
    assert [t.user_attrs["operator"] for t in trials[:3]] == ["seed"] * 3
    assert [t.user_attrs["variant_name"] for t in trials[:3]] == ["naive", "blocktiled", "vectorized"]
    assert len(trials) == 6


@pytest.mark.parametrize("prepares", [0, 3])
def test_the_search_queues_as_many_candidates_ahead_as_the_backend_prepares(
        in_tmp: Path, monkeypatch: pytest.MonkeyPatch, prepares: int) -> None:
    """A backend that compiles ahead in 3 processes gets 3 candidates queued ahead of the one
    measured (one when it prepares none), and the budget stays exact."""
    from evolve.evaluate.replay import ReplayBackend

    events: list[tuple[str, tuple]] = []
    prefetch, evaluate = ReplayBackend.prefetch, ReplayBackend.evaluate

    def key(v: Any, cfg: Mapping[str, int]) -> tuple:
        return v.id, tuple(sorted(cfg.items()))

    def logged_prefetch(self: ReplayBackend, v: Any, cfg: Mapping[str, int]) -> None:
        events.append(("prefetch", key(v, cfg)))
        return prefetch(self, v, cfg)

    def logged_evaluate(self: ReplayBackend, v: Any, cfg: Mapping[str, int], sizes: list) -> Any:
        events.append(("evaluate", key(v, cfg)))
        return evaluate(self, v, cfg, sizes)

    monkeypatch.setattr(ReplayBackend, "prepares", lambda self: prepares)
    monkeypatch.setattr(ReplayBackend, "prefetch", logged_prefetch)
    monkeypatch.setattr(ReplayBackend, "evaluate", logged_evaluate)
    evolve("task=sgemm", f"run.name=deep{prepares}", "search.n_trials=12", "search.seed=0")

    queued, measured, ahead = 0, 0, []  # ahead: queued and not measured, besides the one measured
    for kind, _ in events:
        queued += kind == "prefetch"
        if kind == "evaluate":
            measured += 1
            ahead.append(queued - measured)
    assert max(ahead) == max(1, prepares)
    assert measured == len({k for kind, k in events if kind == "evaluate"}) == 12
    assert len(finished(f"deep{prepares}")) == 12
    assert not [t for t in study(f"deep{prepares}").trials if t.state == TrialState.WAITING]


def test_resume_continues_to_the_same_total(in_tmp: Path) -> None:
    evolve("task=softmax", "run.name=r", "search.n_trials=4")
    first = {t.number: t.value for t in finished("r")}
    evolve("task=softmax", "run.name=r", "search.n_trials=9")
    again = finished("r")
    assert len(again) == 9
    assert {t.number: t.value for t in again if t.number in first} == first  # nothing lost
    evolve("task=softmax", "run.name=r", "search.n_trials=9")
    assert len(finished("r")) == 9  # the budget is spent: nothing more runs
    seeds = [t for t in again if t.user_attrs["operator"] == "seed"]
    assert len(seeds) == 2, "seeds are not measured again on resume"


def test_stale_running_trial_is_retried_without_charging_the_budget(in_tmp: Path) -> None:
    evolve("task=softmax", "run.name=s", "search.n_trials=3")
    s = study("s")
    last = max(finished("s"), key=lambda t: t.number)
    s.enqueue_trial(last.params, user_attrs={k: last.user_attrs[k] for k in ("variant", "variant_name",
                                                                              "operator", "parents")})
    s.ask()  # now RUNNING, as a process killed mid-measurement leaves it
    evolve("task=softmax", "run.name=s", "search.n_trials=5")
    trials = study("s").trials
    interrupted = [t for t in trials if t.user_attrs.get("status") == "interrupted"]
    assert len(interrupted) == 1 and interrupted[0].state == TrialState.FAIL
    assert len(finished("s")) == 5
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_a_candidate_whose_evaluator_died_twice_is_recorded_as_crashed(in_tmp: Path) -> None:
    """A killed run leaves the trial it was measuring RUNNING; a resume queues the candidate again.
    If the evaluator dies on it once more (the candidate may be what kills it), the next resume
    records it as crashed instead of measuring it again, and completes."""
    evolve("task=softmax", "run.name=d", "search.n_trials=3", "search.seed=0")
    naive = task("softmax").seeds()[0]
    measured = [t.params for t in study("d").trials if t.user_attrs["variant"] == naive.id]
    cfg = next(c for c in naive.spec.space() if c not in measured)
    study("d").enqueue_trial(cfg, user_attrs={"variant": naive.id, "variant_name": naive.name,
                                              "operator": "tune", "parents": [naive.id]})
    study("d").ask()  # RUNNING: the run measuring it was killed
    evolve("task=softmax", "run.name=d", "search.n_trials=3")  # the budget is spent: it stays queued
    assert study("d").ask().params == {}  # the next run pops it (params come with measuring) ...
    evolve("task=softmax", "run.name=d", "search.n_trials=5")  # ... and dies measuring it again
    trials = study("d").trials
    crashed = [t for t in trials if t.user_attrs.get("status") == "crashed"]
    assert len(crashed) == 1 and crashed[0].state == TrialState.FAIL
    assert "died 2 times" in crashed[0].user_attrs["reason"] and fixed_params(crashed[0]) == cfg
    assert [t.user_attrs.get("status") for t in trials].count("interrupted") == 1
    assert crashed[0] in finished("d") and len(finished("d")) == 5, "the crash counts, the run completes"
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert not [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs["variant"] == naive.id
                and t.params == cfg], "never measured again"
    assert "crashed" in (in_tmp / "runs/d/report.md").read_text()


def test_search_stops_when_every_configuration_is_measured(in_tmp: Path) -> None:
    evolve("task=transpose", "run.name=x", "search.n_trials=100000", "search.sampler=random")
    assert len(finished("x")) == recorded_space("transpose")
    assert json.loads((in_tmp / "runs/x/best.json").read_text())["stop_reason"] == "exhausted"


@pytest.mark.parametrize("sampler", ["tpe", "random", "bruteforce", "qmc", "cmaes"])
def test_samplers_find_a_configuration_faster_than_the_defaults(in_tmp: Path, sampler: str) -> None:
    evolve("task=transpose", f"run.name={sampler}", "search.n_trials=12", f"search.sampler={sampler}",
           "search.seed=3")
    trials = [t for t in finished(sampler) if t.state == TrialState.COMPLETE]
    seed_best = min(t.value for t in trials if t.user_attrs["operator"] == "seed")
    assert min(t.value for t in trials) < seed_best


def test_timeout_is_a_total_over_resumes(in_tmp: Path) -> None:
    # 1.5 s at 0.1 s per candidate: several trials on a loaded 2-core machine (1 s gave a single
    # one in a CI run, another test process compiling beside it), fewer than the recorded space
    # holds (about 17: it is exhausted before 2 s at 0.05 s per candidate)
    evolve("task=softmax", "run.name=t", "search.n_trials=1000", "search.timeout=1.5",
           "backend.delay_s=0.1")
    n = len(finished("t"))
    assert 2 <= n < 1000
    assert study("t").user_attrs["elapsed_s"] >= 1.5
    evolve("task=softmax", "run.name=t", "search.n_trials=1000", "search.timeout=1.5",
           "backend.delay_s=0.1")
    assert len(finished("t")) == n  # no time left


def test_unrecorded_candidates_are_reported_not_invented(in_tmp: Path, tmp_path: Path) -> None:
    kernels = tmp_path / "k"
    kernels.mkdir()
    src = (KERNELS_DIR / "vector_add/naive.cu").read_text().replace("a[i] + b[i]", "b[i] + a[i]")
    (kernels / "mine.cu").write_text(src)
    evolve("task=vector_add", "run.name=u", "search.n_trials=3", f"task.seeds=[{kernels / 'mine.cu'}]")
    trials = finished("u")
    assert {t.user_attrs["status"] for t in trials} == {"not_recorded"}
    assert "not in the h200/vector_add recording" in trials[0].user_attrs["reason"]
    assert not (in_tmp / "runs/u/best.cu").exists()


def test_changed_task_refuses_to_resume_the_study(in_tmp: Path) -> None:
    from evolve.errors import EvolveError

    evolve("task=softmax", "run.name=c", "search.n_trials=2")
    with pytest.raises(EvolveError, match="different setup"):
        evolve("task=softmax", "run.name=c", "search.n_trials=2", "task.tolerance.rtol=0.1")


def test_sigint_stops_cleanly_and_the_run_resumes(in_tmp: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "evolve", "task=softmax", "run.name=i", "search.n_trials=12", *REPLAY]
    proc = subprocess.Popen([*cmd, "backend.delay_s=0.3"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _completed_trials("runs/evolve.db") < 3:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    hint = next(line for line in err.splitlines() if line.startswith("interrupted: resume with  evolve "))
    command = shlex.split(hint.split("  ", 1)[1])  # the run's own overrides, not only task and name
    assert command == ["evolve", "task=softmax", "search.n_trials=12", *REPLAY, "backend.delay_s=0.3",
                       "run.name=i"]
    done = len(finished("i"))
    assert 3 <= done < 12
    resumed = subprocess.run([sys.executable, "-m", *command], env=env, capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert len(finished("i")) == 12
    s = study("i")
    assert not [t for t in s.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_sigkill_mid_run_then_resume_loses_nothing(in_tmp: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "evolve", "task=softmax", "run.name=k", "search.n_trials=10", *REPLAY]
    proc = subprocess.Popen([*cmd, "backend.delay_s=0.3"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _completed_trials("runs/evolve.db") < 3:
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    before = {t.number: t.value for t in finished("k")}
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=120)
    after = finished("k")
    assert len(after) == 10
    assert {t.number: t.value for t in after if t.number in before} == before
    keys = [(t.user_attrs["variant"], tuple(sorted(t.params.items()))) for t in after]
    assert len(set(keys)) == len(keys), "no candidate measured twice"


@pytest.mark.parametrize(("edit", "tunables", "status", "reason"), [
    (("args: [a, b, c, n]", "args: [a, b, c, bogus]"), {"BLOCK": 256}, "launch_error", "'bogus'"),
    (("block: BLOCK", "block: BLOCK * 4"), {"BLOCK": 512}, "launch_error", "block.x = 2048"),
    (("", ""), {"BLOCK": 48}, "rejected", "BLOCK=48 is not one of"),
])
def test_what_the_gpu_would_refuse_before_running_gets_that_verdict_on_replay(
        edit: tuple[str, str], tunables: dict[str, int], status: str, reason: str) -> None:
    """Not 'not_recorded': a candidate whose plan the GPU backend refuses needs no recording (an
    LLM child naming an unknown argument, a block too large for the GPU)."""
    from evolve.evaluate.replay import ReplayBackend
    from evolve.hardware import named
    from evolve.kernel.spec import Variant
    from evolve.task.task import builtin_task
    from tests.helpers.tasks import hardware_config

    task = builtin_task("vector_add")
    backend = ReplayBackend({})
    backend.start(task, named(hardware_config("h200")))
    source = (KERNELS_DIR / "vector_add/naive.cu").read_text().replace(*edit) + "\n// a child\n"
    m = backend.evaluate(Variant.parse(source, name="child"), tunables, list(task.timing_sizes[:1]))
    assert m.status.value == status and reason in m.reason, m.reason


def test_a_verdict_that_flips_between_tunings_is_said_in_the_log_and_the_report(in_tmp: Path,
                                                                                   tmp_path: Path) -> None:
    """The naive seed passed at its recorded tunings; a recording that judges one of them wrong on
    its values (not out of bounds) makes the run say that the tolerance may be to blame."""
    lines = [json.loads(x) for x in builtin_path("h200", "vector_add").read_text().splitlines()]
    naive = [d for d in lines if d["kind"] == "measurement" and d["name"] == "naive"
             and d["measurement"]["status"] == "ok"]
    off = "c: 3 of 1000003 values off by more than the tolerance at n=1000003, round 2"
    wrong = [{**d, "measurement": {**d["measurement"], "status": "wrong", "timings": {}, "reason": off}}
             for d in naive[1:3]]
    oob = {**naive[3], "measurement": {**naive[3]["measurement"], "status": "wrong", "timings": {},
                                       "reason": "wrote out of bounds of c at n=1000003, round 1"}}
    extra = tmp_path / "flips.jsonl"
    extra.write_text("".join(json.dumps(d) + "\n" for d in [*wrong, oob]))
    out = cli("task=vector_add", "run.name=flip", "backend=replay", "hardware=h200",
              f"backend.recordings=[{extra}]", f"search.n_trials={recorded_space('vector_add')}",
              "search.progress=false")
    assert out.returncode == 0, out.stderr[-2000:]
    said = [line for line in (out.stdout + out.stderr).splitlines() if "judged wrong on its values" in line]
    assert len(said) == 1, said  # once per variant, the first time it both passed and failed
    assert "naive passed " in said[0] and "the tolerance may be tighter" in said[0]
    report = (in_tmp / "runs/flip/report.md").read_text()
    section = report.split("## Verdicts that flipped", 1)[1].split("##", 1)[0]
    # the out-of-bounds verdict is no flip: it is not counted
    assert f"naive passed {len(naive) - 3} of {len(naive) - 1} trials" in section
    assert "in 2:" in section
