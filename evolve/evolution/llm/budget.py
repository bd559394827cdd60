"""Caps on LLM use (calls, tokens, dollars), counted over resumes in the study's attributes."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from evolve.evolution.llm import LLMError

KEYS = ("llm_calls", "llm_prompt_tokens", "llm_completion_tokens", "llm_cost_usd")


@dataclass(frozen=True)
class Prices:
    """USD per million tokens, by model name; unknown models cost 0 (say so in the config)."""

    table: Mapping[str, Mapping[str, float]]

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        p = self.table.get(model) or {}
        usd = prompt_tokens * float(p.get("input", 0.0)) + completion_tokens * float(p.get("output", 0.0))
        return usd / 1e6


class LLMBudget:
    """Thread-safe: proposer threads reserve a call before making it and settle it after."""

    def __init__(self, study: optuna.Study, max_calls: int | None, max_tokens: int | None,
                 max_cost_usd: float | None):
        self.study = study
        self.max_calls, self.max_tokens, self.max_cost = max_calls, max_tokens, max_cost_usd
        attrs = study.user_attrs
        self.spent: dict[str, float] = {k: float(attrs.get(k, 0)) for k in KEYS}
        self._in_flight = 0
        self._lock = threading.Lock()

    def exhausted(self) -> str | None:
        """Which cap is reached, or None."""
        s = self.spent
        if self.max_calls is not None and s["llm_calls"] + self._in_flight >= self.max_calls:
            return f"llm.max_calls={self.max_calls}"
        tokens = s["llm_prompt_tokens"] + s["llm_completion_tokens"]
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"llm.max_tokens={self.max_tokens}"
        if self.max_cost is not None and s["llm_cost_usd"] >= self.max_cost:
            return f"llm.max_cost_usd={self.max_cost}"
        return None

    def reserve(self) -> None:
        with self._lock:
            cap = self.exhausted()
            if cap:
                raise LLMError("budget", f"LLM budget spent ({cap})")
            self._in_flight += 1

    def release(self) -> None:
        """A reserved call that was not made (an answer given again): nothing is counted."""
        with self._lock:
            self._in_flight -= 1

    def settle(self, prompt_tokens: int, completion_tokens: int, cost_usd: float) -> None:
        with self._lock:
            self._in_flight -= 1
            self.spent["llm_calls"] += 1
            self.spent["llm_prompt_tokens"] += prompt_tokens
            self.spent["llm_completion_tokens"] += completion_tokens
            self.spent["llm_cost_usd"] += cost_usd
            for k in KEYS:
                self.study.set_user_attr(k, self.spent[k])

    def summary(self) -> dict[str, Any]:
        s = self.spent
        tokens = s["llm_prompt_tokens"] + s["llm_completion_tokens"]
        return {"calls": int(s["llm_calls"]), "tokens": int(tokens), "cost_usd": round(s["llm_cost_usd"], 4)}
