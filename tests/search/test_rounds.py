"""Rounds between two machines that share nothing but files: a proposer where the model is, an
evaluator on a GPU machine that reaches nothing, each run in turn in a directory of its own, with
the storage file and the artifact directory copied across after each run, as rsync would (a new
file put in place of the old). The replay backend stands in for the GPU and a loopback server for
the model; the storage is real SQLite, or a journal file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from evolve.errors import EvolveError
from evolve.evolution.llm.log import read
from evolve.kernel import compiler
from evolve.kernel.spec import Variant
from evolve.paths import KERNELS_DIR, ROOT
from evolve.record import schema as record
from evolve.record.schema import counts_toward_budget
from tests.helpers.llm import ANSWERS, BLOCK_ROW, KEY, RECORDED, REPAIR, llm_args, softmax_naive_only
from tests.helpers.openai_server import OpenAIServer, Reply, kernel_answer
from tests.helpers.runs import evolve

N_TRIALS = 37  # the whole space of the seed and the children holds 39
_time = time.time
STORAGE = {"sqlite": ([], "runs/evolve.db"), "journal": (["storage=journal"], "runs/evolve.journal")}
# what the model answers to the requests that are not repairs, in order: a child that does not
# compile, a fast one; a new kernel; a wrong one, and one already measured two rounds before
NEW = [ANSWERS["broken_compile"], ANSWERS["warp_rows"], BLOCK_ROW, ANSWERS["broken_wrong"],
       ANSWERS["warp_rows"]]


def model() -> OpenAIServer:
    new = iter(NEW)
    return OpenAIServer(lambda r: Reply(kernel_answer(
        ANSWERS["block_three_pass"] if REPAIR in r.prompt else next(new))))


def copy(src: Path, dst: Path, storage_file: str) -> None:
    """What crosses between the machines: the storage file (to a new file renamed over the old,
    as rsync writes it) and the artifact directory (sources are never rewritten)."""
    target = dst / storage_file
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / storage_file, target.with_name(target.name + ".part"))
    os.replace(target.with_name(target.name + ".part"), target)
    shutil.copytree(src / "runs/artifacts", dst / "runs/artifacts", dirs_exist_ok=True)


def rounds(gpu: Path, here: Path, storage: list[str], storage_file: str,
           monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The seeds' round on the GPU machine, then three rounds of the same two commands; the storage
    is copied to where the next command runs unless both run in one directory. Each run's stop."""
    common = [*softmax_naive_only("rr", N_TRIALS), *storage, "evolution.children_per_round=2"]
    evaluate = [*common, "role=evaluate", "llm=none", f"backend.recordings=[{RECORDED}]",
                "evolution.idle_wait_s=0"]
    stops = []

    def run(side: Path, *args: str) -> None:
        monkeypatch.chdir(side)
        evolve(*args)
        stops.append(_stop(side))

    def no_nvrtc() -> None:
        raise EvolveError("NVRTC is not available (the model's machine has no CUDA)")

    with model() as server:
        run(gpu, *evaluate)
        for _ in range(3):
            if here != gpu:
                copy(gpu, here, storage_file)
            with monkeypatch.context() as m:
                m.setattr(compiler, "_nvrtc", no_nvrtc)
                # one request at a time: the scripted model answers in the order it is asked, so
                # requests side by side would make which child gets which answer a race
                run(here, *common, "role=propose", *llm_args(server, "llm.max_calls=6", "llm.concurrency=1"))
            if here != gpu:
                copy(here, gpu, storage_file)
            run(gpu, *evaluate)
        assert len(server.requests) == 6
    return stops


def _stop(side: Path) -> str:
    return json.loads((side / "runs/rr/best.json").read_text())["stop_reason"]


def history(study: optuna.Study) -> list[tuple]:
    return [(t.user_attrs["variant_name"], t.user_attrs["operator"], tuple(sorted(t.params.items())), t.value,
             t.user_attrs["status"]) for t in sorted(study.trials, key=lambda t: t.number)]


def load(side: Path, storage_file: str) -> optuna.Study:
    if storage_file.endswith(".journal"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        storage = JournalStorage(JournalFileBackend(str(side / storage_file)))
    else:
        storage = optuna.storages.RDBStorage(f"sqlite:///{side / storage_file}")
    return optuna.load_study(study_name="rr", storage=storage)


@pytest.mark.parametrize("kind", sorted(STORAGE))
def test_three_rounds_through_copied_files_carry_everything_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    storage, storage_file = STORAGE[kind]
    gpu, laptop, one = tmp_path / "gpu", tmp_path / "laptop", tmp_path / "one"  # one: both in one place
    for d in (gpu, laptop, one):
        d.mkdir()
    stops = rounds(gpu, laptop, storage, storage_file, monkeypatch)
    assert stops == ["idle", "round", "idle", "round", "idle", "LLM budget spent (llm.max_calls=6)", "budget"]

    s = load(gpu, storage_file)
    trials = sorted(s.trials, key=lambda t: t.number)
    assert len(trials) == N_TRIALS and all(counts_toward_budget(t) for t in trials), "nothing reaped or cut"
    assert not [t for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    keys = {(t.user_attrs["variant"], tuple(sorted(t.params.items()))) for t in trials}
    assert len(keys) == N_TRIALS, "no candidate measured twice"

    # the LLM budget carried over: every call of the three rounds counted once
    log = read(laptop / "runs/rr/llm.jsonl")
    calls = [c for c in log if c["kind"] == "call"]
    assert s.user_attrs["llm_calls"] == len(calls) == 6
    assert s.user_attrs["llm_prompt_tokens"] == sum(c["prompt_tokens"] for c in calls)
    assert s.user_attrs["llm_completion_tokens"] == sum(c["completion_tokens"] for c in calls)
    proposals = sorted((p for p in log if p["kind"] == "proposal"), key=lambda p: p["index"])
    assert [p["index"] for p in proposals] == list(range(6)), "numbered on over the rounds"
    assert proposals[5]["reason"] == f"duplicate: same code as {proposals[1]['child']}", "two rounds before"

    # each child was measured in the round after it was asked for, its failure seen the round after
    children = {p["child"]: p for p in proposals if p["child"]}
    first = {}
    for t in trials:
        first.setdefault(t.user_attrs["variant_name"], t)
    assert set(children) <= set(first), "every child measured"
    assert all(first[c].number >= p["seen"] for c, p in children.items())
    assert [first[c].user_attrs["status"] for c in children] == ["compile_error", "ok", "ok", "ok", "wrong"]
    assert proposals[2]["operator"] == "repair" and proposals[2]["parents"] == [proposals[0]["variant"]]
    asked = {c["proposal"]: c["messages"] for c in calls}
    assert f"- {proposals[0]['child']}: compile_error: " in asked[3][1]["content"], "the failure shown"
    assert "cuda_fp16.h" in asked[0][0]["content"], "the headers the evaluator's NVRTC compiles"
    best = min((t for t in trials if t.value is not None), key=lambda t: t.value)
    assert _best_json(gpu)["time_ms"] == best.value

    if kind == "sqlite":  # the same commands in one directory, nothing copied: the same record
        rounds(one, one, storage, storage_file, monkeypatch)
        assert history(load(one, storage_file)) == history(s)


def test_an_evaluator_with_nothing_new_leaves_and_its_wait_is_not_search_time(in_tmp: Path) -> None:
    evolve(*softmax_naive_only("rr", N_TRIALS), "role=evaluate", "evolution.children_per_round=2",
           "evolution.idle_wait_s=5")
    s = load(in_tmp, "runs/evolve.db")
    assert len(s.trials) == 6, "the seed and the tuning it earned (its whole space), not the budget"
    # the 5 s it waited for anything new are not search time (its work takes about a second, more
    # on a loaded machine: the bound leaves room for that, not for the wait)
    assert _stop(in_tmp) == "idle" and s.user_attrs["elapsed_s"] < 4


def _best_json(side: Path) -> dict:
    return json.loads((side / "runs/rr/best.json").read_text())


def test_a_round_answered_through_a_mailbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proposer's side with ``llm=mailbox``, answered by ``scripts/answer_mailbox.py`` driving a
    command-line model: its round asks twice, one request at a time, and leaves; the GPU side
    measures both children."""
    gpu, laptop, answers = tmp_path / "gpu", tmp_path / "laptop", tmp_path / "answers"
    for d in (gpu, laptop, answers):
        d.mkdir()
    (answers / "1.md").write_text(kernel_answer(ANSWERS["broken_compile"]))
    (answers / "2.md").write_text(kernel_answer(ANSWERS["warp_rows"]))
    common = [*softmax_naive_only("rr", N_TRIALS), "evolution.children_per_round=2"]
    evaluate = [*common, "role=evaluate", "llm=none", f"backend.recordings=[{RECORDED}]",
                "evolution.idle_wait_s=0"]
    monkeypatch.chdir(gpu)
    evolve(*evaluate)
    copy(gpu, laptop, "runs/evolve.db")
    mailbox = laptop / "runs/rr/mailbox"
    mailbox.mkdir(parents=True)
    answerer = subprocess.Popen([sys.executable, str(ROOT / "scripts/answer_mailbox.py"), "--poll", "0.05",
                                 str(mailbox), "--", sys.executable,
                                 str(ROOT / "tests/helpers/scripted_model.py"), str(answers)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        monkeypatch.chdir(laptop)
        evolve(*common, "role=propose", "llm=mailbox", "llm.poll_s=0.02", "llm.timeout_s=60")
    finally:
        answerer.terminate()
        answerer.communicate(timeout=30)
    assert _stop(laptop) == "round"
    assert sorted(p.name for p in mailbox.glob("*.taken")) == ["0001.taken", "0002.taken"]
    copy(laptop, gpu, "runs/evolve.db")
    monkeypatch.chdir(gpu)
    evolve(*evaluate)
    s = load(gpu, "runs/evolve.db")
    children = [t for t in s.trials if t.user_attrs.get("llm_model") == "mailbox"]
    assert sorted(t.user_attrs["status"] for t in children) == ["compile_error", "ok"]
    assert s.user_attrs["llm_calls"] == 2 and s.user_attrs["proposer"] == {"state": "away", "reason": "round"}


def test_a_candidate_a_killed_evaluator_left_is_measured_in_the_next_round(
        in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last evaluator run was killed while it measured a candidate, on a machine whose clock
    is an hour ahead (or the storage came from one): the next run waits until the mark has not
    changed for ``search.stale_after_s`` by its own clock, queues the candidate again and
    measures it before it leaves, charging the budget once."""
    evaluate = [*softmax_naive_only("rr", N_TRIALS), "role=evaluate", "evolution.children_per_round=2",
                "evolution.idle_wait_s=0", "evolution.tune_per_child=1", "search.heartbeat_s=0.1",
                "search.stale_after_s=1"]
    evolve(*evaluate)
    s = load(in_tmp, "runs/evolve.db")
    naive = next(t for t in s.trials if t.user_attrs["operator"] == "seed")
    measured = [t.params for t in s.trials]
    cfg = next(c for c in Variant.parse((KERNELS_DIR / "softmax/naive.cu").read_text()).spec.space()
               if c not in measured)
    s.enqueue_trial(cfg, user_attrs={k: naive.user_attrs[k] for k in ("variant", "variant_name", "parents")}
                    | {"operator": "tune"})
    killed = s.ask()
    with monkeypatch.context() as m:  # its last mark, by a clock an hour ahead
        m.setattr(record.time, "time", lambda: _time() + 3600)
        record.mark_alive(s, record.trial_id(killed))
    evolve(*evaluate)
    trials = load(in_tmp, "runs/evolve.db").trials
    assert [t.user_attrs.get("status") for t in trials].count("interrupted") == 1
    again = [t for t in trials if t.params == cfg and t.state == TrialState.COMPLETE]
    assert len(again) == 1, "measured in this run, once"
    assert not [t for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    assert _stop(in_tmp) == "idle" and len([t for t in trials if counts_toward_budget(t)]) == 3


def test_a_rounds_requests_wait_side_by_side_up_to_the_llm_concurrency(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round's proposals need no result of each other: with ``llm.concurrency=3`` its three
    requests are all in the mailbox before the first is answered (one at a time, a round of slow
    answers took three times as long), and each is taken once."""
    import threading

    gpu, laptop = tmp_path / "gpu", tmp_path / "laptop"
    gpu.mkdir(), laptop.mkdir()
    common = [*softmax_naive_only("rr", N_TRIALS), "evolution.children_per_round=3"]
    monkeypatch.chdir(gpu)
    evolve(*common, "role=evaluate", "llm=none", f"backend.recordings=[{RECORDED}]",
           "evolution.idle_wait_s=0")
    copy(gpu, laptop, "runs/evolve.db")
    mailbox = laptop / "runs/rr/mailbox"
    seen_open: list[int] = []
    stop = threading.Event()

    def answer() -> None:
        deadline = time.monotonic() + 20
        while not stop.is_set():
            open_ = [p for p in mailbox.glob("*.request.json") if not p.with_name(
                p.name.replace("request.json", "answer.done")).exists()]
            if len(open_) >= 3 or (open_ and time.monotonic() > deadline):
                seen_open.append(len(open_))
                for p in open_:
                    p.with_name(p.name.replace("request.json", "answer.md")).write_text(
                        kernel_answer(ANSWERS["warp_rows"]))
                    p.with_name(p.name.replace("request.json", "answer.done")).touch()
            time.sleep(0.02)

    th = threading.Thread(target=answer, daemon=True)
    th.start()
    try:
        monkeypatch.chdir(laptop)
        evolve(*common, "role=propose", "llm=mailbox", "llm.concurrency=3", "evolution.max_pending=3",
               "llm.poll_s=0.02", "llm.timeout_s=60")
    finally:
        stop.set()
        th.join(timeout=10)
    assert seen_open and seen_open[0] == 3, seen_open
    assert sorted(p.name for p in mailbox.glob("*.taken")) == ["0001.taken", "0002.taken", "0003.taken"]
    assert _stop(laptop) == "round" and load(laptop, "runs/evolve.db").user_attrs["llm_calls"] == 3
