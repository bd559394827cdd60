"""Stress rounds a task made from a PyTorch problem file can judge: those its own Model, run in
its own dtypes, passes at the task's tolerance.

A stress round (:mod:`evolve.task.stress`) asks a kernel to stay within the output dtype's
tolerance on inputs far from the ordinary ones. For an ill-conditioned Model (a mean of GroupNorm's
outputs, a loss near zero made of O(1) terms) the Model's own float32 run misses that tolerance too,
and no kernel could pass: measured on KernelBench's level 2 problem 23, PyTorch failed the ``huge``
round in 20 of 20 seeds. So when the task is made, each generic round is run on the Model in float64
and in its own dtypes at every correctness size for a few seeds; a round the Model misses (within
half the tolerance, so that another machine's float32 arithmetic decides the same) at one of them is
left out of the task's rounds, and a held-out size where it misses a round that stays is
left out of the held-out sizes (step 5 of judging re-verifies the winner there; where none is left,
at the correctness sizes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evolve.task.correctness import compare
from evolve.task.stress import GENERIC, Stress
from evolve.task.task import load_task
from evolve.task.torch_reference import TorchReference

SEEDS = 3  # draws per (round, size): a round the Model misses in one of them cannot judge
# the Model must pass within its tolerance divided by this: a round that it passes narrowly (L2 99's
# offset: missed in 5-9 of 20 seeds) would be kept on one machine and left out on another, whose
# float32 arithmetic differs in the last bits, and a kernel summing in another order misses it
MARGIN = 2.0


def judgeable(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``stress`` and ``sizes.holdout`` entries that keep only what the Model passes (an empty
    dict where it passes everything, so the configuration is the same as without this step)."""
    task = load_task(cfg)
    reference = TorchReference(cfg)
    held = list((cfg.get("sizes") or {}).get("holdout") or [])
    failed = [st.name for st in task.stress if st.generic
              and not all(_passes(task, reference, st, s) for s in task.correctness_sizes)]
    kept = [st for st in task.stress if st.generic and st.name not in failed]
    # where the Model misses a kept round at every held-out size, the winner is re-verified at the
    # correctness sizes (it passes every kept round there), never at the task's +1 default
    held_kept = [s for s in held if all(_passes(task, reference, st, s) for st in kept)] \
        or list(cfg["sizes"]["correctness"])
    out: dict[str, Any] = {}
    if failed:
        out["stress"] = {**dict(cfg.get("stress") or {}), "generic": [g for g in GENERIC if g not in failed]}
    if held_kept != held:
        out["sizes"] = {**dict(cfg["sizes"]), "holdout": held_kept}
    return out


def _passes(task: Any, reference: TorchReference, stress: Stress, sizes: Mapping[str, int],
            seeds: Sequence[int] = range(SEEDS)) -> bool:
    for seed in seeds:
        x = task.make_inputs(np, sizes, 1000 + seed, stress)
        want = reference.run(np, x, sizes, native=False)
        if not all(np.isfinite(v).all() for v in want.values()):
            continue  # a round the float64 reference does not fit is skipped when judging anyway
        got = reference.run(np, x, sizes, native=True)
        for arg in task.outputs:
            tol = task.tolerance_for(arg, sizes)
            narrow = tol and dataclasses.replace(tol, atol=tol.atol / MARGIN, rtol=tol.rtol / MARGIN,
                                                 l2=tol.l2 / MARGIN)
            if compare(np, arg.name, got[arg.name], want[arg.name], narrow, fill=None, dtype=arg.dtype):
                return False
    return True
