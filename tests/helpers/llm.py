"""Shared by the tests: LLM arguments, answers and recordings for runs with a model."""

from __future__ import annotations

import optuna

from evolve.paths import KERNELS_DIR, ROOT
from tests.helpers.openai_server import OpenAIServer
from tests.helpers.runs import finished

ANSWERS = {p.stem: p.read_text() for p in (ROOT / "tests/llm_answers/softmax").glob("*.cu")}


RECORDED = ROOT / "tests/recordings/h200/softmax.jsonl"


BLOCK_ROW = (KERNELS_DIR / "softmax/block_row.cu").read_text()


KEY = "sk-planted-test-key-4f1c9a"


REPAIR = "## A kernel that failed"  # the heading of evolve/prompts/repair.md


def llm_args(server: OpenAIServer, *extra: str) -> list[str]:
    return ["llm=openai", f"llm.base_url={server.base_url}", "llm.model=gpt-5-mini", "llm.backoff_s=0.01",
            "llm.max_backoff_s=0.05", "llm.timeout_s=2", *extra]


def softmax_naive_only(run: str, n: int, *extra: str) -> list[str]:
    return ["task=softmax", f"run.name={run}", f"search.n_trials={n}", "search.seed=7",
            f"task.seeds=[{KERNELS_DIR / 'softmax/naive.cu'}]", *extra]


def by_operator(name: str) -> dict[str, list[optuna.trial.FrozenTrial]]:
    out: dict[str, list[optuna.trial.FrozenTrial]] = {}
    for t in finished(name):
        out.setdefault(t.user_attrs["operator"], []).append(t)
    return out
