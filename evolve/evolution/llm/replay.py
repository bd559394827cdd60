"""``llm=replay``: answers recorded prompts from an ``llm.jsonl``, with no network."""

from __future__ import annotations

import random
from collections import deque
from pathlib import Path
from typing import Any

from evolve.errors import EvolveError
from evolve.evolution.llm import Completion, LLMError, Messages, Purpose
from evolve.evolution.llm.log import prompt_hash, read


def run_seed(name: str, recording: str | None) -> int:
    """The seed of a run given none (``search.seed=null``): the recorded run's for ``llm=replay``
    (which operator, which parents: drawn with it, so the replay asks the recorded prompts), else a
    fresh one, written to the run's llm.jsonl for a later replay."""
    if name == "replay" and recording and Path(recording).is_file():
        run = next((x for x in read(Path(recording)) if x["kind"] == "run"), {})
        if isinstance(run.get("seed"), int):
            return int(run["seed"])
    return random.SystemRandom().randrange(2**31)


class ReplayLLM:
    def __init__(self, path: Path):
        if not path.is_file():
            raise EvolveError(f"llm.recording={path} does not exist (it is a run's llm.jsonl)")
        lines = read(path)
        # Identical prompts can get different answers: each is used once, in proposal order.
        self.calls: dict[str, deque[dict[str, Any]]] = {}
        answered = sorted((c for c in lines if c["kind"] == "call"), key=lambda c: c.get("proposal", 0))
        for c in answered:
            self.calls.setdefault(c["prompt_hash"], deque()).append(c)
        self.proposals = [p for p in lines if p["kind"] == "proposal"]
        run = next((x for x in lines if x["kind"] == "run"), None)
        self.caps = {k: run.get(k) for k in ("max_calls", "max_tokens", "max_cost_usd")} if run else None
        self.model = next((c[0]["model"] for c in self.calls.values()), "replay")
        self.path = path

    def complete(self, messages: Messages, purpose: Purpose | None = None) -> Completion:
        h = prompt_hash(messages)
        queue = self.calls.get(h)
        call = queue.popleft() if queue else None
        if call is None:
            raise LLMError(
                "not_recorded", f"prompt {h} is not in {self.path}: this run diverged from the recorded one"
            )
        if "response" not in call:  # the recorded call failed: fail the same way
            kind, _, message = str(call.get("error", "server: recorded failure")).partition(": ")
            raise LLMError(kind, message)
        return Completion(
            text=call["response"], model=call["model"], prompt_tokens=call["prompt_tokens"],
            completion_tokens=call["completion_tokens"], cost_usd=call["cost_usd"], latency_s=0.0,
        )
