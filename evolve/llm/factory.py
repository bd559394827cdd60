"""The LLM a run uses, from the ``llm`` config group (or none, with the reason)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evolve.llm import LLM
from evolve.llm.budget import Prices

NO_ENDPOINT = (
    "no LLM endpoint configured (export OPENAI_API_KEY, or EVOLVE_LLM_BASE_URL and EVOLVE_LLM_MODEL, "
    "or choose llm=openai / llm=local): tuning only"
)


def create_llm(cfg: Mapping[str, Any]) -> tuple[LLM | None, str | None]:
    """The configured LLM, or None and why evolution is off."""
    name = cfg.get("name")
    if name == "none":
        return None, "llm=none: tuning only"
    if name == "replay":
        from evolve.llm.replay import ReplayLLM

        return ReplayLLM(Path(str(cfg["recording"]))), None
    if name == "mailbox":
        from evolve.llm.mailbox import Mailbox

        return Mailbox(cfg, Prices(cfg.get("prices") or {})), None
    if name == "auto":
        if cfg.get("base_url"):
            cfg = {**cfg, "default_api_key": cfg.get("default_api_key") or "EMPTY"}
        elif not os.environ.get(str(cfg.get("api_key_env") or "OPENAI_API_KEY")):
            return None, NO_ENDPOINT
    from evolve.llm.openai_chat import OpenAIChat

    return OpenAIChat(cfg, Prices(cfg.get("prices") or {})), None
