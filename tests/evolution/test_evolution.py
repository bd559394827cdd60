"""LLM evolution end to end: a real OpenAI-protocol server on loopback scripts the answers, the
replay backend answers with recorded H200 measurements, and the storage is real SQLite."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import optuna
import pytest

from evolve.evolution.llm.log import read
from evolve.paths import KERNELS_DIR, ROOT
from evolve.record.schema import counts_toward_budget
from tests.helpers.llm import BLOCK_ROW, KEY, REPAIR, by_operator, llm_args, softmax_naive_only
from tests.helpers.openai_server import OpenAIServer, Reply, Request, diff_answer, kernel_answer
from tests.helpers.runs import evolve, finished, study

NAIVE = (KERNELS_DIR / "softmax/naive.cu").read_text()
TRANSPOSE_TILED = (KERNELS_DIR / "transpose/tiled.cu").read_text()










def test_an_llm_child_beats_the_seed_and_is_tuned(in_tmp: Path, llm_env: None) -> None:
    with OpenAIServer(lambda r: Reply(kernel_answer(BLOCK_ROW))) as server:
        evolve(*softmax_naive_only("e1", 14), *llm_args(server, "llm.max_calls=1"))
    s = study("e1")
    ops = by_operator("e1")
    child = ops["mutate"][0] if "mutate" in ops else ops["mutate_diff"][0] if "mutate_diff" in ops else None
    assert child is not None and child.user_attrs["parents"] and child.user_attrs["llm_model"] == "gpt-5-mini"
    assert child.user_attrs["llm_tokens"] > 0
    seed_best = min(t.value for t in ops["seed"] + ops.get("tune", []) if t.value and
                    t.user_attrs["variant"] == ops["seed"][0].user_attrs["variant"])
    assert s.best_value < seed_best / 5  # block_row is ~12x faster than the naive seed
    assert s.best_trial.user_attrs["variant"] == child.user_attrs["variant"]
    tuned = [t for t in ops.get("tune", []) if t.user_attrs["variant"] == child.user_attrs["variant"]]
    assert tuned, "the child's tunables are searched too"
    meta = s.user_attrs[f"variant:{child.user_attrs['variant']}"]
    assert meta["operator"] == child.user_attrs["operator"] and meta["model"] == "gpt-5-mini"
    assert s.user_attrs["llm_calls"] == 1
    lines = read(in_tmp / "runs/e1/llm.jsonl")
    calls = [x for x in lines if x["kind"] == "call"]
    assert len(calls) == 1 and calls[0]["messages"][0]["role"] == "system"
    prompt = calls[0]["messages"][1]["content"]
    assert "softmax" in prompt and "/*@evolve" in prompt
    best = json.loads((in_tmp / "runs/e1/best.json").read_text())
    assert best["variant"]["operator"] in ("mutate", "mutate_diff")


def test_unusable_answers_go_back_once_and_failures_never_crash(in_tmp: Path, llm_env: None) -> None:
    no_spec = kernel_answer('extern "C" __global__ void k() {}')
    bad_diff = diff_answer([("this line is not in the parent", "x")])
    answers = [Reply(""), Reply(bad_diff),                 # proposal 0: empty, then a diff that fails
               Reply(bad_diff), Reply(kernel_answer(BLOCK_ROW)),  # proposal 1: fixed on the second turn
               Reply(no_spec), Reply(no_spec)]             # proposal 2: no launch spec, twice
    with OpenAIServer(answers + [Reply(kernel_answer(NAIVE))] * 20) as server:
        evolve(*softmax_naive_only("e2", 12), *llm_args(server, "llm.max_calls=6", "llm.concurrency=1"))
        prompts = [r.prompt for r in server.requests]
    assert "the answer is empty" in prompts[1]
    assert "does not match the parent" in prompts[3], "the failed diff is reported back to the LLM"
    assert "launch spec" in prompts[5]
    proposals = [x for x in read(in_tmp / "runs/e2/llm.jsonl") if x["kind"] == "proposal"]
    assert [bool(p["variant"]) for p in proposals] == [False, True, False]
    assert "does not match" in proposals[0]["reason"] and "launch spec" in proposals[2]["reason"]
    assert study("e2").best_value < 1.0  # the child from the second turn
    assert len(finished("e2")) == 12


def test_an_unusable_answer_whose_retry_the_budget_refuses_keeps_its_own_reason(in_tmp: Path,
                                                                                 llm_env: None) -> None:
    """The outcome of such a proposal is the answer's flaw; the budget only explains why no retry."""
    bad_diff = diff_answer([("this line is not in the parent", "x")])
    with OpenAIServer(lambda r: Reply(bad_diff)) as server:
        evolve(*softmax_naive_only("e5", 6), *llm_args(server, "llm.max_calls=1"))
        assert len(server.requests) == 1
    [proposal] = [x for x in read(in_tmp / "runs/e5/llm.jsonl") if x["kind"] == "proposal"]
    assert proposal["reason"].startswith("bad_answer: SEARCH block 1 does not match the parent")
    assert "no retry (llm_budget: LLM budget spent (llm.max_calls=1))" in proposal["reason"]
    evolve(*softmax_naive_only("e5r", 6), "llm=replay", "llm.recording=runs/e5/llm.jsonl")
    [again] = [x for x in read(in_tmp / "runs/e5r/llm.jsonl") if x["kind"] == "proposal"]
    assert again["reason"] == proposal["reason"]  # the replay ends the proposal the same way


def test_http_faults_are_retried_with_backoff(in_tmp: Path, llm_env: None) -> None:
    script = [Reply(status=429, retry_after=0.01), Reply(status=500), Reply(garbage=True),
              Reply(kernel_answer(BLOCK_ROW), delay_s=3.0),  # past the 2 s client timeout
              Reply(kernel_answer(BLOCK_ROW))]
    with OpenAIServer(script) as server:
        evolve(*softmax_naive_only("e3", 6), *llm_args(server, "llm.max_calls=1"))
        assert len(server.requests) == 5
    calls = [x for x in read(in_tmp / "runs/e3/llm.jsonl") if x["kind"] == "call"]
    assert calls[0]["attempts"] == 5 and "response" in calls[0]
    assert any(t.user_attrs["operator"].startswith("mutate") for t in finished("e3"))


def test_endpoint_that_keeps_failing_costs_proposals_not_the_run(in_tmp: Path, llm_env: None) -> None:
    with OpenAIServer(lambda r: Reply(status=503)) as server:
        evolve(*softmax_naive_only("e4", 6), *llm_args(server, "llm.max_calls=2", "llm.max_retries=1"))
    proposals = [x for x in read(in_tmp / "runs/e4/llm.jsonl") if x["kind"] == "proposal"]
    assert len(proposals) == 2 and all(p["reason"].startswith("llm_server") for p in proposals)
    assert len(finished("e4")) == 6  # the budget was spent on tuning instead


def test_budget_caps_hold_and_resume_counts_what_was_spent(in_tmp: Path, llm_env: None) -> None:
    with OpenAIServer(lambda r: Reply(kernel_answer(NAIVE.replace("softmax_naive", "softmax_naive2")),
                                      prompt_tokens=1000, completion_tokens=500)) as server:
        caps = ("llm.max_calls=50", "llm.max_tokens=3000", "llm.concurrency=1")  # one call in flight
        evolve(*softmax_naive_only("e5", 6), *llm_args(server, *caps))
        first = len(server.requests)
        attrs = study("e5").user_attrs
        assert attrs["llm_prompt_tokens"] + attrs["llm_completion_tokens"] >= 3000
        evolve(*softmax_naive_only("e5", 12), *llm_args(server, *caps))
        assert len(server.requests) == first, "the token cap spent in the first run still holds"
    assert first == 2
    ops = by_operator("e5")
    assert len(ops["seed"]) == 1, "the seed is not re-added on resume"
    assert len(finished("e5")) == 6 + 2  # naive's whole space, then two tries of the unrecorded child


def test_cost_cap(in_tmp: Path, llm_env: None) -> None:
    big = Reply(kernel_answer(NAIVE), prompt_tokens=400_000, completion_tokens=0)
    with OpenAIServer(lambda r: big) as srv:
        evolve(*softmax_naive_only("e6", 5), *llm_args(srv, "llm.max_cost_usd=0.15", "llm.concurrency=1"))
        assert len(srv.requests) == 2  # 0.10 USD per call at gpt-5-mini's input price
    assert study("e6").user_attrs["llm_cost_usd"] == pytest.approx(0.2)


def test_a_run_given_no_seed_replays_identically(in_tmp: Path, llm_env: None) -> None:
    """Issue 28.4: the operator and parents are drawn at random; the seed the run drew is recorded
    in its llm.jsonl and taken up by llm=replay (before, the replay diverged at its first proposal)."""
    args = ["task=transpose", "search.n_trials=12", f"task.seeds=[{KERNELS_DIR / 'transpose/naive.cu'}]",
            "evolution.tune_per_child=2", "evolution.operators={mutate: 0.5, mutate_diff: 0.5}"]
    with OpenAIServer(lambda r: Reply(kernel_answer(TRANSPOSE_TILED))) as server:
        evolve(*args, "run.name=orig", *llm_args(server, "llm.max_calls=3"))
    os.environ.pop("OPENAI_API_KEY")
    evolve(*args, "run.name=again", "llm=replay", "llm.recording=runs/orig/llm.jsonl")
    seeds = [x["seed"] for name in ("orig", "again") for x in read(in_tmp / f"runs/{name}/llm.jsonl")
             if x["kind"] == "run"]
    assert len(seeds) == 2 and seeds[0] == seeds[1] and isinstance(seeds[0], int)

    def proposals(name: str) -> list[tuple]:
        return [(p["operator"], p["variant"], p["reason"]) for p in sorted(
            (x for x in read(in_tmp / f"runs/{name}/llm.jsonl") if x["kind"] == "proposal"),
            key=lambda p: p["index"])]

    assert proposals("again") == proposals("orig") and len(proposals("orig")) == 3


def test_the_recording_replays_identically_without_a_network(in_tmp: Path, llm_env: None) -> None:
    counter = {"n": 0}

    def script(r: Request) -> Reply:
        counter["n"] += 1
        if counter["n"] % 5 == 4:
            return Reply(status=503)  # a failed call is part of the record too
        return Reply(kernel_answer(TRANSPOSE_TILED if counter["n"] % 3 else "no kernel today"))

    args = ["task=transpose", "search.n_trials=24", "search.seed=11",
            f"task.seeds=[{KERNELS_DIR / 'transpose/naive.cu'}]", "evolution.tune_per_child=3"]
    with OpenAIServer(script) as server:
        evolve(*args, "run.name=orig", *llm_args(server, "llm.max_calls=6", "llm.max_retries=0"))
    os.environ.pop("OPENAI_API_KEY")
    evolve(*args, "run.name=again", "llm=replay", "llm.recording=runs/orig/llm.jsonl")

    def history(name: str) -> list[tuple]:
        return [(t.user_attrs["variant_name"], t.user_attrs["operator"], tuple(sorted(t.params.items())),
                 t.value) for t in sorted(finished(name), key=lambda t: t.number)]

    assert history("again") == history("orig")
    unusable = sum(1 for x in read(in_tmp / "runs/orig/llm.jsonl") if x["kind"] == "proposal"
                   and x.get("reason") and not x.get("variant"))
    assert unusable  # issue 28.12: the report counts them
    assert f", {unusable} gave no child (by kind: " in (in_tmp / "runs/orig/report.md").read_text()
    orig = sorted((x for x in read(in_tmp / "runs/orig/llm.jsonl") if x["kind"] == "proposal"),
                  key=lambda p: p["index"])
    again = sorted((x for x in read(in_tmp / "runs/again/llm.jsonl") if x["kind"] == "proposal"),
                   key=lambda p: p["index"])
    assert [(p["operator"], p["variant"], p["reason"]) for p in again] == \
           [(p["operator"], p["variant"], p["reason"]) for p in orig]


def test_a_prompt_missing_from_the_recording_is_reported(in_tmp: Path, llm_env: None) -> None:
    with OpenAIServer(lambda r: Reply(kernel_answer(BLOCK_ROW))) as server:
        evolve(*softmax_naive_only("r1", 6), *llm_args(server, "llm.max_calls=1"))
    evolve(*softmax_naive_only("r2", 6, "task.tolerance.rtol=0.0002"), "llm=replay",
           "llm.recording=runs/r1/llm.jsonl")
    proposals = [x for x in read(in_tmp / "runs/r2/llm.jsonl") if x["kind"] == "proposal"]
    assert proposals and "not in runs/r1/llm.jsonl" in proposals[0]["reason"]


def test_the_api_key_is_never_written_anywhere(in_tmp: Path, llm_env: None) -> None:
    with OpenAIServer(lambda r: Reply(status=401, text=f"Incorrect API key provided: {KEY}")) as server:
        evolve(*softmax_naive_only("k1", 4), *llm_args(server, "llm.max_calls=1"))
        assert server.requests[0].header("authorization") == f"Bearer {KEY}"
    for path in Path("runs").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"the key leaked into {path}"


def test_proposer_and_evaluator_processes_share_only_the_storage(
        in_tmp: Path, postgres_url: str) -> None:
    import subprocess
    import sys
    import time

    naive = KERNELS_DIR / "softmax/naive.cu"
    common = ["task=softmax", "run.name=split", "search.n_trials=12", "hardware=h200", "storage=postgres",
              f"storage.url='{postgres_url}'", f"task.seeds=[{naive}]", "search.progress=false"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVOLVE_LLM_"))},
           "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": KEY}
    with OpenAIServer(lambda r: Reply(kernel_answer(BLOCK_ROW))) as server:
        evaluator = subprocess.Popen(
            [sys.executable, "-m", "evolve", *common, "role=evaluate", "backend=replay", "llm=none",
             "evolution.idle_wait_s=30"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        storage = optuna.storages.RDBStorage(postgres_url)
        while time.monotonic() < deadline:
            try:
                if optuna.load_study(study_name="split", storage=storage).user_attrs.get("hardware_spec"):
                    break
            except KeyError:
                pass
            time.sleep(0.2)
        proposer = subprocess.run([sys.executable, "-m", "evolve", *common, "role=propose", "llm=openai",
                                   f"llm.base_url={server.base_url}", "llm.max_calls=1"],
                                  env=env, capture_output=True, text=True, timeout=120)
        out, err = evaluator.communicate(timeout=120)
    assert proposer.returncode == 0, proposer.stderr
    assert evaluator.returncode == 0, err
    s = optuna.load_study(study_name="split", storage=storage)
    finished = [t for t in s.trials if t.state.is_finished()]
    done = [t for t in finished if counts_toward_budget(t)]
    assert len(done) == 12, "exactly the budget"
    # two processes queue candidates concurrently: one may land past the budget or repeat a
    # candidate the other queued a moment before; such a trial is marked and not measured
    extra = [t.user_attrs.get("status") for t in finished if not counts_toward_budget(t)]
    assert len(extra) <= 2 and set(extra) <= {"over_budget", "no_candidate", "duplicate"}, extra
    child = [t for t in done if t.user_attrs["operator"] in ("mutate", "mutate_diff", "crossover")]
    assert len(child) == 1 and child[0].user_attrs["status"] == "ok"
    assert s.best_trial.user_attrs["variant"] == child[0].user_attrs["variant"]
    assert s.user_attrs["proposer"]["state"] == "done"
    assert KEY not in out + err + proposer.stdout + proposer.stderr


def test_a_failed_child_goes_back_once_with_its_diagnostics(in_tmp: Path, llm_env: None) -> None:
    answers = ROOT / "tests/llm_answers/softmax"
    broken, fixed = (answers / "broken_compile.cu").read_text(), (answers / "block_three_pass.cu").read_text()

    def script(r: Request) -> Reply:
        return Reply(kernel_answer(fixed if "## A kernel that failed" in r.prompt else broken))

    with OpenAIServer(script) as server:
        recorded = ROOT / "tests/recordings/h200/softmax.jsonl"
        evolve(*softmax_naive_only("rep", 12), *llm_args(server, "llm.max_calls=2"),
               "evolution.overlap=false", f"backend.recordings=[{recorded}]")
        repair_prompts = [r.prompt for r in server.requests if "## A kernel that failed" in r.prompt]
    assert len(repair_prompts) == 1, "one repair per failed child"
    assert "compile_error" in repair_prompts[0] and 'identifier "inv_sum" is undefined' in repair_prompts[0]
    ops = by_operator("rep")
    assert ops["repair"][0].user_attrs["status"] == "ok"
    broken_child = next(t for op in ("mutate", "mutate_diff", "crossover") for t in ops.get(op, []))
    assert broken_child.user_attrs["status"] == "compile_error"
    assert ops["repair"][0].user_attrs["parents"] == [broken_child.user_attrs["variant"]]
    assert study("rep").best_trial.user_attrs["variant"] == ops["repair"][0].user_attrs["variant"]
    blind = [t for t in finished("rep") if t.user_attrs["variant"] == broken_child.user_attrs["variant"]]
    assert len(blind) == 2, "a variant that never worked is tried at most twice"


def test_failed_children_are_repaired_before_any_more_blind_proposals(in_tmp: Path, llm_env: None) -> None:
    """Two calls at once (llm.concurrency=2, evolution.max_pending=2), each answered only once both
    were asked: both children fail. The next two calls are their repairs, each asked once its
    child's failure is measured; the fifth, a new mutation, shows both failures. Measuring takes
    0.2 s a candidate, so the old schedule asked calls 3 and 4 blind while the failed children were
    still queued or being measured."""
    answers = ROOT / "tests/llm_answers/softmax"
    src = {p.stem: p.read_text() for p in answers.glob("*.cu")}
    both_asked = threading.Barrier(2, timeout=30)
    blind: list[str] = []
    lock = threading.Lock()

    def script(r: Request) -> Reply:
        if REPAIR in r.prompt:  # the wrong one's sum skips each row's last column
            return Reply(kernel_answer(src["warp_rows" if "cols - 1" in r.prompt else "block_three_pass"]))
        with lock:
            blind.append(r.prompt)
            n = len(blind)
        if n > 2:
            return Reply(kernel_answer(BLOCK_ROW))
        both_asked.wait()
        return Reply(kernel_answer(src["broken_compile" if n == 1 else "broken_wrong"]))

    recorded = ROOT / "tests/recordings/h200/softmax.jsonl"
    with OpenAIServer(script) as server:
        evolve(*softmax_naive_only("order", 30), *llm_args(server, "llm.max_calls=5", "llm.concurrency=2",
                                                           "llm.timeout_s=30"),
               "evolution.max_pending=2", "backend.delay_s=0.2", f"backend.recordings=[{recorded}]")
        prompts = [r.prompt for r in server.requests]
    assert [REPAIR in p for p in prompts] == [False, False, True, True, False], "fails, then their repairs"
    assert {"cols - 1" in p for p in prompts[2:4]} == {True, False}, "one repair for each failed child"
    proposals = sorted((x for x in read(in_tmp / "runs/order/llm.jsonl") if x["kind"] == "proposal"),
                       key=lambda p: p["index"])
    failed = {p["child"]: p for p in proposals[:2]}
    trials = {t.user_attrs["variant_name"]: t for t in sorted(finished("order"), key=lambda t: -t.number)}
    for p in proposals[2:4]:  # planned only once the failure it repairs was measured
        assert p["operator"] == "repair" and p["seen"] > trials[failed_child(p, failed)].number
    assert "## Recent failures" in prompts[4]
    assert all(f"- {name}: " in prompts[4] for name in failed), "both failures shown to the model"
    statuses = {trials[name].user_attrs["status"] for name in failed}
    assert statuses == {"compile_error", "wrong"}
    repaired = [t for t in finished("order") if t.user_attrs["operator"] == "repair"]
    assert {t.user_attrs["status"] for t in repaired} == {"ok"} and len(finished("order")) == 30


def failed_child(repair: dict, failed: dict[str, dict]) -> str:
    """The name of the child a repair proposal worked on."""
    return next(name for name, p in failed.items() if p["variant"] == repair["parents"][0])
