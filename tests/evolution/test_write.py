"""A task without seeds: the LLM writes the first kernel (the ``write`` operator), judged and tuned
like any other; without an LLM, one clear line. A real OpenAI-protocol server on loopback answers,
the replay backend measures (the written kernel is a recorded one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.evolution.llm.log import read
from evolve.evolution.prompts import Prompts
from evolve.hardware import named
from evolve.task.files import read_task_file
from evolve.task.task import load_task
from tests.helpers.llm import ANSWERS, BLOCK_ROW, KEY, by_operator, llm_args
from tests.helpers.openai_server import OpenAIServer, Reply, kernel_answer
from tests.helpers.runs import check_lines, cli, evolve, one_line_error, study
from tests.helpers.tasks import OWN, hardware_config


def test_without_seeds_the_llm_writes_the_first_kernel(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    answers = [Reply("I would rather not."), Reply(kernel_answer(BLOCK_ROW))]  # unusable, then a kernel
    with OpenAIServer(answers) as server:
        evolve("task=softmax", "task.seeds=[]", "run.name=w1", "search.n_trials=6", "search.seed=3",
               *llm_args(server, "llm.max_calls=2", "llm.concurrency=1"))
    ops = by_operator("w1")
    assert set(ops) == {"write", "tune"}, ops.keys()
    first = ops["write"][0]
    assert first.number == 0 and first.user_attrs["parents"] == [] and first.value is not None
    assert all(t.user_attrs["variant"] == first.user_attrs["variant"] for t in ops["tune"])
    assert study("w1").best_value <= first.value
    calls = [x for x in read(in_tmp / "runs/w1/llm.jsonl") if x["kind"] == "call"]
    prompt = calls[0]["messages"][1]["content"]
    assert "There is no kernel for this task yet" in prompt
    assert "def softmax(xp: Any, x: Arrays, s: Sizes) -> Arrays:" in prompt  # the reference's source
    assert "x: input float32[rows, cols] (const float*)" in prompt and "/*@evolve" in prompt
    assert len(calls) == 2 and calls[1]["messages"][2]["content"] == "I would rather not."  # sent back once
    lineage = (in_tmp / "runs/w1/lineage.md").read_text()
    assert "write" in lineage


def test_without_seeds_and_without_an_llm_one_line(in_tmp: Path) -> None:
    out = cli("task=softmax", "task.seeds=[]", "backend=replay", "hardware=h200", "llm=none")
    one_line_error(out, "task softmax has no seed kernels and no LLM to write the first one")


def test_the_write_prompt_carries_the_task_the_reference_and_the_dtypes() -> None:
    t = load_task({**read_task_file(OWN / "histogram" / "histogram.yaml"), "seeds": []})
    assert t.seed_paths == ()
    messages = Prompts(t, named(hardware_config("h200"))).write()
    user = messages[1]["content"]
    assert "counts: inout int32[bins] (int*, read and updated in place)" in user
    assert "values: input int32[n] (const int*)" in user
    assert "def histogram(xp, x, sizes):" in user and "Tolerance: counts: exact." in user
    assert "bounded by memory alone" in user
    assert "an inout argument is read and updated in place" in messages[0]["content"]


def test_check_says_that_the_llm_will_write_the_first_kernel() -> None:
    code, lines = check_lines({**read_task_file(OWN / "histogram" / "histogram.yaml"), "seeds": []})
    assert code == 0, lines
    assert any(ln.startswith("note: no seed kernels: an LLM writes the first one") for ln in lines)
    assert "no seeds" in lines[-1]


def test_a_pytorch_task_s_write_prompt_gives_the_model_once_and_no_empty_reference() -> None:
    """Its reference is the Model (in the task's text); a section saying that its source 'is not
    available' told the model nothing and read as if something were missing."""
    pytest.importorskip("torch")
    from evolve.task.torch_task import task_config

    t = load_task(task_config(Path(__file__).parents[1] / "torch_problems" / "layer_norm.py", None))
    user = Prompts(t, named(hardware_config("h200"))).write()[1]["content"]
    assert user.count("self.norm = nn.LayerNorm(features)") == 1  # the Model's source, once
    assert "not available" not in user and "## The reference" not in user
    assert "There is no kernel for this task yet" in user



def test_a_write_round_makes_as_many_writes_as_the_round_asks_however_fast_the_answers(
        in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``role=propose`` in rounds leaves before anything is measured, so a write need not wait for
    another's result: a round of three asks three times, whether the answers come in minutes
    (a mailbox: every request is out before the first answer) or at once (a loopback server, or
    the replay of that mailbox round, which made one write where the recorded round made ten)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    kernels = iter([BLOCK_ROW, ANSWERS["warp_rows"], ANSWERS["block_three_pass"]])
    with OpenAIServer(lambda r: Reply(kernel_answer(next(kernels)))) as server:
        evolve("task=softmax", "task.seeds=[]", "run.name=w3", "search.n_trials=20", "search.seed=3",
               "role=propose", "evolution.children_per_round=3", "hardware=h200",
               *llm_args(server, "llm.concurrency=1"))
    proposals = [x for x in read(in_tmp / "runs/w3/llm.jsonl") if x["kind"] == "proposal"]
    assert [p["operator"] for p in proposals] == ["write"] * 3 and all(p["child"] for p in proposals)
