"""LLM answers carrying the specs that used to crash the parser (deep nesting, a 5000-digit
integer, a space too costly to enumerate) are refused as answers: the run goes on and finishes,
and each proposal records why. A real OpenAI-protocol server on loopback gives the answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.evolution.llm.log import read
from evolve.paths import KERNELS_DIR, ROOT
from tests.helpers.openai_server import OpenAIServer, Reply, kernel_answer
from tests.helpers.runs import evolve, finished

HOSTILE = {name: (ROOT / "tests/adversarial" / name).read_text()
           for name in ("spec_deep_nesting.cu", "spec_huge_int.cu", "enumeration_bomb.cu")}
REASONS = {"spec_deep_nesting.cu": "nest", "spec_huge_int.cu": "cannot be read",
           "enumeration_bomb.cu": "too costly to enumerate"}


def test_hostile_specs_in_answers_are_refused_and_the_run_finishes(
        in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    answers = [Reply(kernel_answer(source)) for source in HOSTILE.values() for _ in range(2)]  # + retry
    with OpenAIServer(answers + [Reply(status=503)] * 50) as server:
        evolve("task=vector_add", "run.name=hostile", "search.n_trials=6", "search.seed=1",
               f"task.seeds=[{KERNELS_DIR / 'vector_add/naive.cu'}]", "llm=openai",
               f"llm.base_url={server.base_url}", "llm.model=gpt-5-mini", "llm.max_calls=6",
               "llm.concurrency=1", "llm.max_retries=0", "llm.timeout_s=2")
    proposals = [x for x in read(in_tmp / "runs/hostile/llm.jsonl") if x["kind"] == "proposal"]
    assert len(proposals) >= 3 and not any(p["variant"] for p in proposals)
    for p, (name, words) in zip(proposals, REASONS.items(), strict=False):
        assert words in p["reason"], (name, p["reason"])
    assert len(finished("hostile")) == 6  # the naive seed's whole space was tuned: the run completed
