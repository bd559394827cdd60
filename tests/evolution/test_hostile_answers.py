"""LLM answers carrying the specs that used to crash the parser (deep nesting, a 5000-digit
integer, a space too costly to enumerate) are refused as answers: the run goes on and finishes,
and each proposal records why. A real OpenAI-protocol server on loopback gives the answers."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from evolve.evolution.answers import AnswerError, child_source, parse_child
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


# ---- the parser itself: linear time, bounded, every failure an AnswerError ----------------------

MIB = 1 << 20
NAIVE = (KERNELS_DIR / "softmax/naive.cu").read_text()


def _fill(unit: str, total: int = MIB) -> str:
    return (unit * (total // len(unit) + 1))[:total]


ADVERSARIAL = {  # 1 MiB each, the answer limit: each was quadratic (or worse) in the old regexes
    "openers": _fill("<<<<<<< SEARCH\n"),
    "openers_with_separators": _fill("<<<<<<< SEARCH\nx\n=======\n"),
    "backticks": "`" * MIB,
    "fence_openers_without_newline": _fill("```cuda "),
    "fence_opener_then_no_closer": "```cuda\n" + _fill("`` x\n", MIB - 8),
    "nested_markers": _fill("<<<<<<<<< SEARCH =========>>>>>>>>> REPLACE "),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_answers_at_the_size_limit_are_refused_in_linear_time(name: str) -> None:
    answer = ADVERSARIAL[name]
    assert len(answer) == MIB
    t0 = time.perf_counter()
    with pytest.raises(AnswerError):
        parse_child(answer, NAIVE, "x")
    assert time.perf_counter() - t0 < 2.0, name


def test_a_loose_search_over_a_long_parent_is_linear() -> None:
    parent = "x\n" * 49_000  # under MAX_SOURCE_CHARS; the old loose match compared 24k lines 25k times
    answer = "<<<<<<< SEARCH\n" + "  x\n" * 24_000 + "y\n=======\nz\n>>>>>>> REPLACE\n"
    t0 = time.perf_counter()
    with pytest.raises(AnswerError, match="does not match"):
        child_source(answer, parent)
    assert time.perf_counter() - t0 < 2.0


def test_edits_are_bounded_in_number_and_in_the_size_they_grow_the_source_to() -> None:
    many = "\n".join("<<<<<<< SEARCH\nfloat inv\n=======\nfloat inv\n>>>>>>> REPLACE" for _ in range(101))
    with pytest.raises(AnswerError, match="more than 100 SEARCH/REPLACE blocks"):
        child_source(many, NAIVE)
    grow = "<<<<<<< SEARCH\nfloat inv = 1.f / s;\n=======\n" + "// pad\n" * 20_000 + \
           "float inv = 1.f / s;\n>>>>>>> REPLACE\n"
    with pytest.raises(AnswerError, match="longer than 100000 characters"):
        child_source(grow, NAIVE)


@pytest.mark.parametrize(("answer", "message"), [
    (f"```cuda\n{NAIVE}\ud800\n```", "lone surrogate \\(U\\+D800\\) at character"),
    ("\udfff" + "```cuda\n" + NAIVE + "```", "lone surrogate"),
    ("<<<<<<< SEARCH\nfloat inv = 1.f / s;\n=======\nfloat inv = 1.f / s; // \udc80\n>>>>>>> REPLACE",
     "lone surrogate"),
    (f"```cuda\n{NAIVE}\0\n```", "NUL character"),
    ("x" * (MIB + 1), "the answer is longer than"),
    (f"```cuda\n{'//' * 60_000}\n```", "the kernel is longer than"),
    ("```cuda\n\n```", "no code block"),
    ("```cuda\n" + NAIVE, "no code block"),  # never closed
    ("<<<<<<< SEARCH\nfloat inv\n=======\nx\n", "no code block"),  # never closed, and no kernel
])
def test_every_unusable_answer_is_an_answer_error(answer: str, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        parse_child(answer, NAIVE, "x")


def test_random_mixtures_of_markers_only_ever_give_a_child_or_an_answer_error() -> None:
    pieces = ["```", "```cuda\n", "\n", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "/*@evolve",
              "*/", "float inv = 1.f / s;", NAIVE[:400], "\ud800", "\0", " ", "`", "\r\n", "é"]
    rng = random.Random(24)
    outcomes = set()
    for _ in range(400):
        answer = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 60)))
        try:
            parse_child(answer, NAIVE, "x")
            outcomes.add("child")
        except AnswerError:
            outcomes.add("refused")
    assert "refused" in outcomes
