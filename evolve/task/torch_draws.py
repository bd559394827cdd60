"""How a task made from a PyTorch problem file draws its arguments (:mod:`evolve.task.torch_task`).

Floats are signed normal whatever the file draws them from (``torch.rand``'s U[0,1) lets wrong
kernels pass), unless the reference is NaN on them: then the example's own range; integers in
the example's range, indices up to the size they index; the Model's parameters and buffers in the
range the Model initialises them to (a constant c as U[c/2, 3c/2], zero as signed normal).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from evolve import dtypes


def input_init(example: torch.Tensor, dtype: str, sizes: Mapping[str, int]) -> Any:
    """Floats: signed normal (the default). Integers: the example's range, indices up to a size."""
    kind = dtypes.get(dtype).kind
    if kind == "float":
        return None
    if kind == "bool":
        return {"dist": "bernoulli"}
    lo, hi = int(example.min()), int(example.max())
    bounded = [k for k, v in sorted(sizes.items(), key=lambda kv: kv[1]) if hi < v <= 2 * (hi + 1)]
    if lo >= 0 and bounded:
        return {"dist": "randint", "low": 0, "high": f"{bounded[0]} - 1"}
    return {"dist": "randint", "low": lo, "high": hi}


def state_init(t: torch.Tensor, dtype: str) -> dict[str, Any] | None:
    kind = dtypes.get(dtype).kind
    if t.numel() == 0 or kind == "bool":
        return None
    lo, hi = float(t.min()), float(t.max())
    if kind == "int":
        return {"dist": "randint", "low": int(lo), "high": int(hi)}
    if lo < hi:
        return {"dist": "uniform", "low": lo, "high": hi}
    if lo == 0:
        return None
    return {"dist": "uniform", "low": min(lo / 2, 1.5 * lo), "high": max(lo / 2, 1.5 * lo)}


def positive_where_needed(cfg: dict[str, Any], examples: Mapping[str, torch.Tensor]) -> None:
    """Signed normal inputs make the reference NaN where the Model needs positive ones (a log, a
    square root, probabilities): such an input, positive in the file's own example and given no
    ``init``, is then drawn from the example's range."""
    from evolve.task.task import load_task

    positive = {a: t for a, t in examples.items() if "init" not in cfg["args"][a]
                and t.is_floating_point() and t.numel() and float(t.min()) > 0}
    if not positive or _finite(load_task(cfg)):
        return
    for a, t in positive.items():
        cfg["args"][a]["init"] = {"dist": "uniform", "low": float(t.min()), "high": float(t.max())}


def _finite(task: Any) -> bool:
    """The reference is finite at the first correctness sizes."""
    for sizes in task.correctness_sizes[:2]:
        with np.errstate(all="ignore"):
            ref = task.expected(np, task.make_inputs(np, sizes, 5), sizes)
        if not all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in ref.values()):
            return False
    return True
