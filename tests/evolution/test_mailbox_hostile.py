"""``llm=mailbox`` against a hostile or careless directory (issue 24.9) and after a kill (28.6).

Whatever lies in the mailbox is data: an answer linked to another file, a FIFO, a device, a hard
link, a stray file with a huge number, a usage file with Infinity or negative counts. Each is an
``LLMError`` (a failed proposal, the request left open to be answered properly), never another
exception out of ``complete()``, never a read of a file outside the mailbox. Real directories,
real links and FIFOs; the resume case kills a real run (a subprocess) and resumes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evolve.evolution.llm import LLMError
from evolve.evolution.llm.log import read
from evolve.paths import ROOT
from tests.evolution.test_mailbox import MAILBOX, MESSAGES, PURPOSE, box, in_thread, wait_for
from tests.helpers.llm import BLOCK_ROW, softmax_naive_only
from tests.helpers.openai_server import kernel_answer
from tests.helpers.runs import REPLAY, evolve, finished, study

SECRET = "the contents of a file outside the mailbox"


def answered(folder: Path, n: int = 1) -> tuple[Path, Path]:
    """Run one request to its answer's turn: the paths to write the answer and the marker at."""
    return folder / f"{n:04d}.answer.md", folder / f"{n:04d}.answer.done"


def refused(folder: Path, plant: object, words: str) -> None:
    """``plant(answer_path)`` puts something there; the call fails with ``words`` and the same
    request, answered with a plain file afterwards, gives that answer."""
    mb = box(folder, timeout_s=10)
    th, out = in_thread(mb, MESSAGES, PURPOSE)
    wait_for(folder / "0001.request.json")
    answer, done = answered(folder)
    plant(answer)
    done.touch()
    th.join(10)
    assert not th.is_alive(), "the read never ended"
    err = out.get("error")
    assert isinstance(err, LLMError) and err.kind == "unreadable", out
    assert words in str(err) and SECRET not in str(err)
    assert not (folder / "0001.taken").exists()
    answer.unlink()
    answer.write_text("a plain answer")
    assert mb.complete(MESSAGES).text == "a plain answer", "the request stayed open"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


def test_an_answer_linked_to_a_file_outside_the_mailbox_is_not_read(tmp_path: Path, secret: Path) -> None:
    refused(tmp_path / "mb", lambda p: p.symlink_to(secret), "symbolic link")


def test_an_answer_hard_linked_to_another_file_is_not_read(tmp_path: Path, secret: Path) -> None:
    refused(tmp_path / "mb", lambda p: os.link(secret, p), "hard link")


def test_an_answer_linked_to_dev_zero_is_not_read_until_memory_runs_out(tmp_path: Path) -> None:
    refused(tmp_path / "mb", lambda p: p.symlink_to("/dev/zero"), "symbolic link")


def test_an_answer_that_is_a_fifo_does_not_block_the_proposer(tmp_path: Path) -> None:
    refused(tmp_path / "mb", lambda p: os.mkfifo(p), "not a plain file")


def test_an_answer_over_the_size_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    refused(tmp_path / "mb", lambda p: p.write_bytes(b"x" * ((1 << 20) + 1)), "larger than 1048576 bytes")


@pytest.mark.parametrize(("usage", "words"), [
    ('{"prompt_tokens": Infinity, "completion_tokens": 5}', "Infinity is not a number of tokens"),
    ('{"prompt_tokens": 1e400, "completion_tokens": 5}', "prompt_tokens must be a whole number"),
    ('{"prompt_tokens": NaN, "completion_tokens": 5}', "NaN is not a number of tokens"),
    ('{"prompt_tokens": 100, "completion_tokens": -5000}', "completion_tokens must be a whole number"),
    ('{"prompt_tokens": 12.5, "completion_tokens": 5}', "prompt_tokens must be a whole number"),
    ('{"prompt_tokens": true, "completion_tokens": 5}', "prompt_tokens must be a whole number"),
    ('{"prompt_tokens": 1' + "0" * 30 + ', "completion_tokens": 5}', "prompt_tokens must be a whole number"),
    ('[1, 2]', "must hold an object"),
    ('{"prompt_tokens": ', "is not JSON"),
])
def test_usage_values_must_be_whole_token_counts_in_range(tmp_path: Path, usage: str, words: str) -> None:
    mb = box(tmp_path, timeout_s=10)
    th, out = in_thread(mb, MESSAGES)
    wait_for(tmp_path / "0001.request.json")
    answer, done = answered(tmp_path)
    answer.write_text("answer")
    (tmp_path / "0001.usage.json").write_text(usage)
    done.touch()
    th.join(10)
    err = out.get("error")
    assert isinstance(err, LLMError) and err.kind == "unreadable" and words in str(err), out
    (tmp_path / "0001.usage.json").write_text('{"prompt_tokens": 7, "completion_tokens": 3}')
    c = mb.complete(MESSAGES)  # the same request, with a usable usage file now
    assert (c.text, c.prompt_tokens, c.completion_tokens) == ("answer", 7, 3)


def test_a_usage_file_linked_elsewhere_is_not_read(tmp_path: Path, secret: Path) -> None:
    mb = box(tmp_path, timeout_s=10)
    th, out = in_thread(mb, MESSAGES)
    wait_for(tmp_path / "0001.request.json")
    (tmp_path / "0001.usage.json").symlink_to(secret)
    (tmp_path / "0001.answer.md").write_text("answer")
    (tmp_path / "0001.answer.done").touch()
    th.join(10)
    assert out["error"].kind == "unreadable" and "symbolic link" in str(out["error"])


def test_stray_files_do_not_set_the_next_number(tmp_path: Path) -> None:
    (tmp_path / ("9" * 246 + ".txt")).write_text("a stray file")  # the next name would be too long
    (tmp_path / "12345678901.prompt.md").write_text("a number past the mailbox's range")
    (tmp_path / "0042.notes.txt").write_text("not one of the mailbox's names")
    for _ in range(2):  # and again at the next resume
        with pytest.raises(LLMError) as err:
            box(tmp_path, timeout_s=0.05).complete(MESSAGES)
        assert err.value.kind == "timeout"
    assert sorted(p.name for p in tmp_path.glob("*.request.json")) == ["0001.request.json"]


def test_a_link_left_under_the_temporary_name_is_not_written_through(tmp_path: Path, secret: Path) -> None:
    folder = tmp_path / "mb"
    folder.mkdir()
    (folder / ".0001.request.json.tmp").symlink_to(secret)
    with pytest.raises(LLMError):
        box(folder, timeout_s=0.05).complete(MESSAGES)
    assert secret.read_text() == SECRET
    assert json.loads((folder / "0001.request.json").read_text())["messages"] == MESSAGES


def test_a_faulty_directory_is_a_failed_call_not_an_exception(tmp_path: Path) -> None:
    folder = tmp_path / "mb"
    mb = box(folder, timeout_s=0.05)
    (folder / "0001.prompt.md").mkdir()  # taken by a directory...
    (folder / "0002.prompt.md").symlink_to(tmp_path / "nowhere")  # ...a dangling link
    (folder / "0003.prompt.md").write_text("")
    os.mkfifo(folder / "0004.request.json")  # an open request that is a FIFO: ignored, not waited on
    with pytest.raises(LLMError) as err:  # 0001-0003 exist: claimed as 0004, whose request is a FIFO
        mb.complete([{"role": "user", "content": "x\ud800"}])  # a lone surrogate in the prompt
    assert err.value.kind in ("timeout", "unreadable"), err.value
    assert box(folder, timeout_s=0.05) is not None  # a resume reads the directory without raising


def test_a_fault_in_a_run_is_a_recorded_failed_proposal(in_tmp: Path, secret: Path) -> None:
    mailbox = in_tmp / "runs/link/mailbox"

    def plant() -> None:
        wait_for(mailbox / "0001.request.json", 60)
        (mailbox / "0001.answer.md").symlink_to(secret)
        (mailbox / "0001.answer.done").touch()

    planter = threading.Thread(target=plant, daemon=True)
    planter.start()
    evolve(*softmax_naive_only("link", 6), *MAILBOX, "llm.timeout_s=5", "llm.max_calls=1")
    proposals = [x for x in read(in_tmp / "runs/link/llm.jsonl") if x["kind"] == "proposal"]
    assert len(proposals) == 1 and proposals[0]["variant"] is None
    assert proposals[0]["reason"].startswith("llm_unreadable: ") and "symbolic link" in proposals[0]["reason"]
    assert SECRET not in (in_tmp / "runs/link/llm.jsonl").read_text()
    assert len(finished("link")) == 6


# ---- 28.6: a retry open when the run was killed is taken up by the resumed run --------------------

def test_a_resumed_run_takes_up_the_retry_that_was_open_when_it_was_killed(in_tmp: Path) -> None:
    common = [*MAILBOX, "evolution.overlap=false"]
    mailbox = in_tmp / "runs/kill/mailbox"
    cmd = [sys.executable, "-m", "evolve", *REPLAY, *softmax_naive_only("kill", 7), *common,
           "llm.timeout_s=120", "llm.max_calls=3"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(cmd, cwd=in_tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(mailbox / "0001.request.json", 120)
        (mailbox / "0001.answer.md").write_text("Use shared memory and warp shuffles.")  # no code: unusable
        (mailbox / "0001.answer.done").touch()
        wait_for(mailbox / "0002.request.json", 60)
        time.sleep(0.2)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(30)
    retry = json.loads((mailbox / "0002.request.json").read_text())
    assert len(retry["messages"]) == 4 and "could not be used" in retry["messages"][3]["content"]
    assert not (mailbox / "0002.taken").exists()
    first_calls = study("kill").user_attrs["llm_calls"]
    (mailbox / "0002.answer.md").write_text(kernel_answer(BLOCK_ROW))  # while the run is stopped
    (mailbox / "0002.answer.done").touch()

    evolve(*softmax_naive_only("kill", 12), *common, "llm.timeout_s=0.5", "llm.max_calls=3",
           "evolution.tune_per_child=1")
    assert (mailbox / "0002.taken").exists(), "the open retry was read"
    requests = [json.loads(p.read_text()) for p in sorted(mailbox.glob("*.request.json"))]
    assert [r["messages"] for r in requests].count(retry["messages"]) == 1, "no second retry written"
    assert all(r["messages"] != requests[0]["messages"] for r in requests[1:]), "nor the first turn again"
    child = next(t for t in finished("kill") if t.user_attrs["operator"] in ("mutate", "mutate_diff"))
    assert child.user_attrs["status"] == "ok"
    proposals = [x for x in read(in_tmp / "runs/kill/llm.jsonl") if x["kind"] == "proposal"]
    assert proposals[0]["variant"] == child.user_attrs["variant"]
    assert proposals[0]["calls"] == [requests[0]["prompt_hash"], retry["prompt_hash"]]
    # the first answer was counted once, when the killed run took it; the retry's answer once now
    assert first_calls == 1 and study("kill").user_attrs["llm_calls"] >= 2
