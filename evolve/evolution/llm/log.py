"""``llm.jsonl``: every LLM exchange of a run, and every proposal it led to.

Two kinds of lines. A ``call`` holds the messages sent, the answer, usage and timing, keyed by
a hash of the messages (that is what ``llm=replay`` answers by). A ``proposal`` says which
operator ran, how many finished trials its prompt saw, which calls it made and what came of
it (a child and its trial number, or the reason it failed): the schedule a replay follows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from evolve.evolution.llm import Messages


def prompt_hash(messages: Messages) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


class ExchangeLog:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, kind: str, **fields: Any) -> None:
        line = {"kind": kind, "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"), **fields}
        with self._lock, self.path.open("a") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
