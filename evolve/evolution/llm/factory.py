"""The LLM a run uses, from the ``llm`` config group (or none, with the reason)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from evolve.errors import EvolveError
from evolve.evolution.llm import LLM
from evolve.evolution.llm.budget import Prices
from evolve.settings import LLMSettings

NO_ENDPOINT = (
    "no LLM endpoint configured (export OPENAI_API_KEY, or EVOLVE_LLM_BASE_URL and EVOLVE_LLM_MODEL, "
    "or choose llm=openai / llm=local): tuning only"
)


def create_llm(cfg: LLMSettings) -> tuple[LLM | None, str | None]:
    """The configured LLM, or None and why evolution is off."""
    if cfg.name == "none":
        return None, "llm=none: tuning only"
    if cfg.name == "replay":
        from evolve.evolution.llm.replay import ReplayLLM

        if not cfg.recording:
            raise EvolveError("llm=replay needs llm.recording=runs/<run>/llm.jsonl")
        return ReplayLLM(Path(cfg.recording)), None
    if cfg.name == "mailbox":
        from evolve.evolution.llm.mailbox import Mailbox

        return Mailbox(cfg, Prices(cfg.prices)), None
    if cfg.name == "auto":
        if cfg.base_url:
            cfg = dataclasses.replace(cfg, default_api_key=cfg.default_api_key or "EMPTY")
        elif not os.environ.get(cfg.api_key_env):
            return None, NO_ENDPOINT
    from evolve.evolution.llm.openai_chat import OpenAIChat

    return OpenAIChat(cfg, Prices(cfg.prices)), None
