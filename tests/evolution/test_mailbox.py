"""``llm=mailbox``: requests and answers as files, on real directories with real threads and
processes; whole runs on the replay backend with real SQLite, answered by ``scripts/answer_mailbox.py``
driving a scripted command-line model, or by the test writing files as a person would."""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evolve.errors import EvolveError
from evolve.evolution.llm import LLMError, Purpose
from evolve.evolution.llm.budget import Prices
from evolve.evolution.llm.factory import create_llm
from evolve.evolution.llm.log import prompt_hash, read
from evolve.evolution.llm.mailbox import Mailbox, estimate_tokens
from evolve.paths import ROOT
from evolve.settings import LLMSettings
from tests.helpers.llm import BLOCK_ROW, softmax_naive_only
from tests.helpers.openai_server import kernel_answer
from tests.helpers.runs import evolve, finished, study

SCRIPT = ROOT / "scripts/answer_mailbox.py"
MODEL = ROOT / "tests/helpers/scripted_model.py"
ANSWERS = ROOT / "tests/llm_answers/softmax"
RECORDED = ROOT / "tests/recordings/h200/softmax.jsonl"
MESSAGES = [{"role": "system", "content": "You write CUDA kernels."},
            {"role": "user", "content": "Make it faster.\n```cuda\nextern \"C\" __global__ void k() {}\n```"}]
PURPOSE = Purpose(4, "mutate_diff", (("a1b2", "naive"),), "Answer with SEARCH/REPLACE edits.")
MAILBOX = ["llm=mailbox", "llm.poll_s=0.02"]


def box(folder: Path, timeout_s: float = 10.0, **cfg: object) -> Mailbox:
    return Mailbox(LLMSettings(name="mailbox", mailbox=str(folder), timeout_s=timeout_s, poll_s=0.01,
                               **cfg), Prices({}))


def wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def in_thread(mb: Mailbox, messages: list[dict[str, str]], purpose: Purpose | None = None
              ) -> tuple[threading.Thread, dict[str, object]]:
    out: dict[str, object] = {}

    def call() -> None:
        try:
            out["completion"] = mb.complete(messages, purpose)
        except LLMError as exc:
            out["error"] = exc

    th = threading.Thread(target=call, daemon=True)
    th.start()
    return th, out


def test_a_half_written_answer_is_read_only_once_it_is_marked_done(tmp_path: Path) -> None:
    mb = box(tmp_path)
    th, out = in_thread(mb, MESSAGES, PURPOSE)
    wait_for(tmp_path / "0001.request.json")
    answer = kernel_answer(BLOCK_ROW)
    (tmp_path / "0001.answer.md").write_text(answer[:100])  # pasted half-way, saved
    time.sleep(0.3)
    assert th.is_alive() and not (tmp_path / "0001.taken").exists(), "read before .done"
    (tmp_path / "0001.answer.md").write_text(answer.replace("\n", "\r\n"))  # a Windows editor
    (tmp_path / "0001.answer.done").touch()
    th.join(5)
    c = out["completion"]
    assert c.text == answer, "the whole answer, newlines normalized"
    assert c.model == "mailbox" and c.cost_usd == 0.0
    assert c.prompt_tokens == sum(math.ceil(len(m["content"]) / 4) for m in MESSAGES)
    assert c.completion_tokens == math.ceil(len(answer) / 4) == estimate_tokens(answer)
    assert (tmp_path / "0001.taken").exists()


def test_the_prompt_file_is_for_a_person_and_the_request_file_for_a_program(tmp_path: Path) -> None:
    tricky = [MESSAGES[0], {"role": "user", "content": "Edits like this:\n`````\nx\n`````\n## Not a heading"}]
    with pytest.raises(LLMError) as err:
        box(tmp_path, timeout_s=0.05).complete(tricky, PURPOSE)
    assert err.value.kind == "timeout" and "0001.answer.md" in str(err.value)
    prompt = (tmp_path / "0001.prompt.md").read_text()
    lines = prompt.splitlines()
    assert lines[0] == "# Request 0001: mutate_diff of `naive` (proposal 4)"
    assert "Answer format (the last message says the same): Answer with SEARCH/REPLACE edits." in prompt
    assert "## 1. System message" in prompt and "## 2. User message" in prompt
    assert "``````markdown\nEdits like this:" in prompt, "a fence longer than any inside the message"
    assert lines[-1] == (f"Write the model's whole answer to {tmp_path / '0001.answer.md'}, "
                         f"then create {tmp_path / '0001.answer.done'}")
    request = json.loads((tmp_path / "0001.request.json").read_text())
    assert request["messages"] == tricky and request["prompt_hash"] == prompt_hash(tricky)
    assert request["operator"] == "mutate_diff" and request["parents"] == [{"id": "a1b2", "name": "naive"}]
    assert request["answer_format"] == PURPOSE.answer_format and request["proposal"] == 4
    assert request["answer_file"] == "0001.answer.md" and request["done_file"] == "0001.answer.done"
    assert not list(tmp_path.glob(".*")), "no temporary file left behind"


def test_usage_given_by_the_answerer_replaces_the_estimate_and_is_priced(tmp_path: Path) -> None:
    mb = Mailbox(LLMSettings(name="mailbox", mailbox=str(tmp_path), poll_s=0.01, model="gpt-5"),
                 Prices({"gpt-5": {"input": 1.25, "output": 10.0}}))
    th, out = in_thread(mb, MESSAGES)
    wait_for(tmp_path / "0001.request.json")
    (tmp_path / "0001.answer.md").write_text("answer")
    (tmp_path / "0001.usage.json").write_text('{"prompt_tokens": 1000, "completion_tokens": 200}')
    (tmp_path / "0001.answer.done").touch()
    th.join(5)
    c = out["completion"]
    assert (c.prompt_tokens, c.completion_tokens, c.model) == (1000, 200, "gpt-5")
    assert c.cost_usd == pytest.approx((1000 * 1.25 + 200 * 10.0) / 1e6)


def test_a_done_marker_without_an_answer_is_reported_and_the_request_stays_open(tmp_path: Path) -> None:
    mb = box(tmp_path)
    th, out = in_thread(mb, MESSAGES)
    wait_for(tmp_path / "0001.request.json")
    (tmp_path / "0001.answer.done").touch()
    th.join(5)
    assert out["error"].kind == "unreadable" and "0001.answer.md" in str(out["error"])
    (tmp_path / "0001.answer.md").write_text("late but whole")
    assert mb.complete(MESSAGES).text == "late but whole", "the same request, answered now"
    assert not (tmp_path / "0002.prompt.md").exists()


def test_numbers_only_grow_across_resumes_and_an_open_request_is_reused(tmp_path: Path) -> None:
    other = [MESSAGES[0], {"role": "user", "content": "Something else."}]
    with pytest.raises(LLMError):
        box(tmp_path, timeout_s=0.05).complete(MESSAGES)  # 0001 never answered: the run stopped
    first = (tmp_path / "0001.prompt.md").read_bytes()
    (tmp_path / "0005.answer.md").write_text("a stray file")
    (tmp_path / "0001.answer.md").write_text("written while the run was stopped")
    (tmp_path / "0001.answer.done").touch()
    resumed = box(tmp_path, timeout_s=0.05)
    with pytest.raises(LLMError):
        resumed.complete(other)
    assert (tmp_path / "0006.request.json").exists(), "after the highest number present"
    assert resumed.complete(MESSAGES).text == "written while the run was stopped"
    assert (tmp_path / "0001.prompt.md").read_bytes() == first
    assert sorted(p.name for p in tmp_path.glob("*.prompt.md")) == ["0001.prompt.md", "0006.prompt.md"]
    with pytest.raises(LLMError):
        box(tmp_path, timeout_s=0.05).complete(MESSAGES)  # taken: asking again is a new request
    assert (tmp_path / "0007.prompt.md").exists()


def test_two_mailboxes_on_one_directory_never_share_a_number(tmp_path: Path) -> None:
    boxes = [box(tmp_path, timeout_s=0.01), box(tmp_path, timeout_s=0.01)]

    def ask(mb: Mailbox, k: int) -> None:
        for i in range(8):
            with pytest.raises(LLMError):
                mb.complete([{"role": "user", "content": f"box {k} prompt {i}"}])

    threads = [threading.Thread(target=ask, args=(mb, k)) for k, mb in enumerate(boxes)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    requests = [json.loads(p.read_text()) for p in tmp_path.glob("*.request.json")]
    assert sorted(r["number"] for r in requests) == list(range(1, 17))
    assert len({r["messages"][0]["content"] for r in requests}) == 16


def test_the_factory_makes_a_mailbox_and_refuses_one_without_a_directory(tmp_path: Path) -> None:
    llm, why_not = create_llm(LLMSettings(name="mailbox", mailbox=str(tmp_path / "mb"), model="claude-chat"))
    assert isinstance(llm, Mailbox) and why_not is None and llm.model == "claude-chat"
    assert (tmp_path / "mb").is_dir()
    with pytest.raises(EvolveError, match=r"llm\.mailbox is required"):
        create_llm(LLMSettings(name="mailbox", mailbox=None))


def answer_script(mailbox: Path, *command: str, once: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *(["--once"] if once else []), str(mailbox), "--",
                           *command], capture_output=True, text=True, timeout=60)


def test_the_answer_script_answers_waiting_requests_with_a_command(tmp_path: Path) -> None:
    mb = box(tmp_path / "mb", timeout_s=0.01)
    follow_up = [*MESSAGES, {"role": "assistant", "content": "no code"},
                 {"role": "user", "content": "Again."}]
    for messages in (MESSAGES, follow_up, [{"role": "user", "content": "a person is on it"}]):
        with pytest.raises(LLMError):
            mb.complete(messages)
    (tmp_path / "mb/0003.answer.md").write_text("half of a pasted ans")  # no .done yet
    echo = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())"]
    done = answer_script(tmp_path / "mb", *echo)
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["0001", "0002"]
    system, user = (m["content"] for m in MESSAGES)
    assert (tmp_path / "mb/0001.answer.md").read_text() == f"{system}\n\n{user}"
    assert (tmp_path / "mb/0002.answer.md").read_text().endswith(
        "Make it faster.\n```cuda\nextern \"C\" __global__ void k() {}\n```\n\n"
        "Your previous answer was:\n\nno code\n\nAgain.")
    assert (tmp_path / "mb/0001.answer.done").exists() and (tmp_path / "mb/0002.answer.done").exists()
    assert (tmp_path / "mb/0003.answer.md").read_text() == "half of a pasted ans", "a person's file untouched"
    assert not (tmp_path / "mb/0003.answer.done").exists()
    assert box(tmp_path / "mb").complete(MESSAGES).text.startswith("You write CUDA kernels.\n\n")


def test_the_answer_script_leaves_a_request_unanswered_when_the_command_fails(tmp_path: Path) -> None:
    with pytest.raises(LLMError):
        box(tmp_path, timeout_s=0.01).complete(MESSAGES)
    fails = "import sys; print('quota exceeded', file=sys.stderr); sys.exit(3)"
    failed = answer_script(tmp_path, sys.executable, "-c", fails)
    assert failed.returncode == 1 and "exit code 3: quota exceeded" in failed.stderr
    assert not (tmp_path / "0001.answer.md").exists() and not (tmp_path / "0001.answer.done").exists()
    missing = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nope"), "--", "cat"],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "is not a directory" in missing.stderr


def history(name: str) -> list[tuple]:
    return [(t.user_attrs["variant_name"], t.user_attrs["operator"], tuple(sorted(t.params.items())), t.value,
             t.user_attrs["status"]) for t in sorted(finished(name), key=lambda t: t.number)]


def test_a_run_answered_through_the_mailbox_measures_its_children_and_replays(in_tmp: Path) -> None:
    answers = in_tmp / "answers"
    answers.mkdir()
    (answers / "1.md").write_text(kernel_answer((ANSWERS / "broken_compile.cu").read_text()))
    (answers / "2.md").write_text(kernel_answer((ANSWERS / "warp_rows.cu").read_text()))
    (answers / "repair.md").write_text(kernel_answer((ANSWERS / "block_three_pass.cu").read_text()))
    mailbox = in_tmp / "runs/mb/mailbox"
    mailbox.mkdir(parents=True)
    answerer = subprocess.Popen([sys.executable, str(SCRIPT), "--poll", "0.05", str(mailbox), "--",
                                 sys.executable, str(MODEL), str(answers)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        evolve(*softmax_naive_only("mb", 16), *MAILBOX, "llm.max_calls=3", "llm.timeout_s=60",
               f"backend.recordings=[{RECORDED}]")
    finally:
        answerer.terminate()
        out, err = answerer.communicate(timeout=30)
    requests = sorted(mailbox.glob("*.request.json"))
    assert [p.name for p in requests] == ["0001.request.json", "0002.request.json", "0003.request.json"]
    assert out.count("answered") == 3, err
    calls = {c["prompt_hash"]: c for c in read(in_tmp / "runs/mb/llm.jsonl") if c["kind"] == "call"}
    assert len(calls) == 3
    for path in requests:
        n = path.name[:4]
        request = json.loads(path.read_text())
        call = calls[request["prompt_hash"]]
        assert call["messages"] == request["messages"], "llm.jsonl holds what the prompt file showed"
        assert call["response"] == (mailbox / f"{n}.answer.md").read_text()
        assert (mailbox / f"{n}.taken").exists() and call["model"] == "mailbox"
        assert call["prompt_tokens"] == sum(estimate_tokens(m["content"]) for m in request["messages"])
        prompt = (mailbox / f"{n}.prompt.md").read_text()
        assert request["operator"] in prompt and request["answer_format"] in prompt
        assert request["messages"][1]["content"] in prompt
    # one request at a time (llm.concurrency=1): each is asked once the child before it is measured,
    # so the first child's failure comes back as the second request, and the third shows it
    ops = ("mutate", "mutate_diff", "crossover", "repair")
    children = sorted((t for t in finished("mb") if t.user_attrs["operator"] in ops and
                       t.user_attrs.get("llm_model")), key=lambda t: t.number)
    assert [t.user_attrs["status"] for t in children] == ["compile_error", "ok", "ok"]
    assert all(t.user_attrs["llm_model"] == "mailbox" for t in children)
    first, repair, third = (json.loads(p.read_text()) for p in requests)
    assert first["operator"] in ("mutate", "mutate_diff") and third["operator"] != "repair"
    assert repair["operator"] == "repair" and children[1].user_attrs["operator"] == "repair"
    assert repair["parents"] == [{"id": children[0].user_attrs["variant"],
                                  "name": children[0].user_attrs["variant_name"]}]
    assert "compile_error" in repair["messages"][1]["content"]
    assert f"- {children[0].user_attrs['variant_name']}: compile_error: " in third["messages"][1]["content"]
    assert (answers / "given").read_text() == "2", "two new kernels asked for, and one repair"
    s = study("mb")
    assert s.best_trial.user_attrs["variant"] in {t.user_attrs["variant"] for t in children[1:]}
    assert s.user_attrs["llm_calls"] == 3 and s.user_attrs["llm_prompt_tokens"] > 1000
    assert len(finished("mb")) == 16

    evolve(*softmax_naive_only("again", 16), "llm=replay", "llm.recording=runs/mb/llm.jsonl",
           f"backend.recordings=[{RECORDED}]")
    assert history("again") == history("mb")
    assert not (in_tmp / "runs/again/mailbox").exists()


def test_an_unanswered_request_fails_its_proposal_while_the_gpu_keeps_tuning(in_tmp: Path) -> None:
    evolve(*softmax_naive_only("late", 8), *MAILBOX, "llm.timeout_s=1.5", "llm.max_calls=1",
           "backend.delay_s=0.05")
    proposals = [x for x in read(in_tmp / "runs/late/llm.jsonl") if x["kind"] == "proposal"]
    prompt = in_tmp / "runs/late/mailbox/0001.prompt.md"
    assert len(proposals) == 1 and proposals[0]["variant"] is None
    answer = prompt.with_name("0001.answer.md")
    assert proposals[0]["reason"] == (f"llm_timeout: no answer in {answer} within 1.5 s "
                                      "(0001.answer.done was not created)")
    asked = dt.datetime.fromtimestamp(prompt.stat().st_mtime)
    during = [t for t in finished("late") if asked < t.datetime_complete < asked + dt.timedelta(seconds=1.5)]
    assert during, "candidates were measured while the request waited"
    assert len(finished("late")) == 6, "the seed's whole space, then nothing left to do"
    assert study("late").user_attrs["llm_calls"] == 1


def test_a_resumed_run_numbers_on_and_takes_an_answer_written_while_it_was_stopped(in_tmp: Path) -> None:
    common = [*MAILBOX, "evolution.overlap=false", "llm.timeout_s=0.5"]
    evolve(*softmax_naive_only("res", 7), *common, "llm.max_calls=1")  # asks once the seed is tuned
    mailbox = in_tmp / "runs/res/mailbox"
    first = (mailbox / "0001.prompt.md").read_bytes()
    assert [p.name for p in mailbox.glob("*.prompt.md")] == ["0001.prompt.md"]
    (mailbox / "0001.answer.md").write_text(kernel_answer(BLOCK_ROW))  # while the run is stopped
    (mailbox / "0001.answer.done").touch()

    evolve(*softmax_naive_only("res", 12), *common, "llm.max_calls=3", "evolution.tune_per_child=1")
    assert (mailbox / "0001.prompt.md").read_bytes() == first and (mailbox / "0001.taken").exists()
    assert sorted(p.name for p in mailbox.glob("*.prompt.md")) == ["0001.prompt.md", "0002.prompt.md"]
    assert not (mailbox / "0002.taken").exists()
    calls = [c for c in read(in_tmp / "runs/res/llm.jsonl") if c["kind"] == "call"]
    assert ["response" in c for c in calls] == [False, True, False]
    assert calls[1]["response"] == kernel_answer(BLOCK_ROW)
    child = next(t for t in finished("res") if t.user_attrs["operator"] in ("mutate", "mutate_diff"))
    assert child.user_attrs["status"] == "ok" and study("res").best_trial.user_attrs["variant"] == \
        child.user_attrs["variant"]
    assert study("res").user_attrs["llm_calls"] == 3 and len(finished("res")) == 12
