"""LLM access: any OpenAI-compatible endpoint, files answered by hand (a mailbox), or a replay.

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
    again: bool = False  # an answer taken (and counted) before, given once more: no new model call


@dataclass(frozen=True)
class Purpose:
    """What a call is for. Endpoints ignore it; ``llm=mailbox`` shows it to whoever answers."""

    proposal: int
    operator: str
    parents: tuple[tuple[str, str], ...]  # (variant id, name)
    answer_format: str  # the instructions the prompt ends with


class LLMError(Exception):
    """A call that produced no usable answer; ``kind`` says why (timeout, rate_limit, server,
    auth, bad_request, garbage, not_recorded, budget)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class LLM(Protocol):
    model: str

    def complete(self, messages: Messages, purpose: Purpose | None = None) -> Completion:
        """One chat completion; raises LLMError after retries are spent."""
