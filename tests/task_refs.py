"""References of tasks the tests define themselves (imported as ``task_refs:function``)."""

from __future__ import annotations

from typing import Any


def argmax_rows(xp: Any, x: dict[str, Any], s: dict[str, int]) -> dict[str, Any]:
    return {"idx": xp.argmax(x["x"], axis=1).astype(xp.float64)}
