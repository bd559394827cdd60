"""Chat completions from any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama, llama.cpp).

Retries with exponential backoff (honouring Retry-After) on rate limits, server errors,
timeouts, dropped connections and unparseable answers; a concurrency limit; usage and cost
accounting. The API key is read from the environment variable the config names.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

from evolve.errors import EvolveError
from evolve.evolution.llm import Completion, LLMError, Messages, Purpose
from evolve.evolution.llm.budget import Prices
from evolve.settings import LLMSettings


class OpenAIChat:
    def __init__(self, cfg: LLMSettings, prices: Prices):
        try:
            import openai
        except ImportError:
            raise EvolveError("the openai package is missing: pip install openai") from None
        self._openai = openai
        self.model = cfg.model or ""
        if not self.model:
            raise EvolveError("llm.model is required, e.g. llm.model=gpt-5-mini")
        key = os.environ.get(cfg.api_key_env) or cfg.default_api_key
        if not key:
            raise EvolveError(
                f"{cfg.api_key_env} is not set: export it, or use llm=local for a server without keys")
        self._client = openai.OpenAI(base_url=cfg.base_url or None, api_key=key, timeout=cfg.timeout_s,
                                     max_retries=0)
        self._secret = key  # only to scrub it from error messages
        self.prices = prices
        self.max_retries = cfg.max_retries
        self.backoff_s = cfg.backoff_s
        self.max_backoff_s = cfg.max_backoff_s
        self._slots = threading.Semaphore(max(1, cfg.concurrency))
        self._params: dict[str, Any] = {}
        if cfg.temperature is not None:
            self._params["temperature"] = cfg.temperature
        if cfg.max_output_tokens:
            self._params[cfg.token_param] = cfg.max_output_tokens
        self._rng = random.Random()

    def complete(self, messages: Messages, purpose: Purpose | None = None) -> Completion:
        t0 = time.monotonic()
        for attempt in range(1, self.max_retries + 2):
            try:
                with self._slots:
                    resp = self._client.chat.completions.create(
                        model=self.model, messages=messages, **self._params  # type: ignore[arg-type]
                    )
                text = resp.choices[0].message.content or ""
                usage = resp.usage
                prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
                completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
                return Completion(
                    text=text, model=self.model, prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    cost_usd=self.prices.cost(self.model, prompt_tokens, completion_tokens),
                    latency_s=time.monotonic() - t0, attempts=attempt,
                )
            except Exception as exc:
                kind, retry_after = self._classify(exc)
                if kind in ("auth", "bad_request") or attempt > self.max_retries:
                    message = _short(exc).replace(self._secret, "***")
                    raise LLMError(kind, f"{kind} after {attempt} attempt(s): {message}") from None
                time.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")

    def _classify(self, exc: Exception) -> tuple[str, float | None]:
        o = self._openai
        retry_after = None
        response = getattr(exc, "response", None)
        if response is not None:
            try:
                retry_after = float(response.headers.get("retry-after"))
            except (TypeError, ValueError):
                retry_after = None
        if isinstance(exc, o.RateLimitError):
            return "rate_limit", retry_after
        if isinstance(exc, o.APITimeoutError):
            return "timeout", None
        if isinstance(exc, o.APIConnectionError):
            return "connection", None
        if isinstance(exc, o.AuthenticationError | o.PermissionDeniedError):
            return "auth", None
        if isinstance(exc, o.APIStatusError):
            return ("server", retry_after) if exc.status_code >= 500 else ("bad_request", None)
        if isinstance(exc, IndexError | AttributeError | ValueError | o.APIResponseValidationError):
            return "garbage", None  # a 200 whose body is not a chat completion
        return "garbage", None

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        return min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * (0.5 + self._rng.random())


def _short(exc: Exception) -> str:
    return f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
