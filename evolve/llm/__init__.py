"""LLM access: any OpenAI-compatible endpoint, or a replay of a recorded run.

The proposer sees only :class:`LLM`; every call is accounted against the budget and written
to ``llm.jsonl``. API keys are read from the environment at construction and kept only inside
the client object: never logged, stored or recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    attempts: int = 1


class LLMError(Exception):
    """A call that produced no usable answer; ``kind`` says why (timeout, rate_limit, server,
    auth, bad_request, garbage, not_recorded, budget)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class LLM(Protocol):
    model: str

    def complete(self, messages: Messages) -> Completion:
        """One chat completion; raises LLMError after retries are spent."""
