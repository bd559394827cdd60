"""Step 3 of judging a candidate: correctness at every correctness size, several rounds.

Each round gets fresh secret-seeded inputs in guarded buffers and outputs pre-filled with a value
the kernel must overwrite; the first round launches twice on the same inputs (a race shows as a
different answer). After the ordinary rounds come the task's stress rounds (``evolve.task.stress``),
one each per size; one whose reference its outputs cannot hold is checked for everything else.
After each launch: guard zones intact, inputs unchanged (made again from their
seed and compared bit for bit), outputs compared with the float64 reference of the inputs made
again. Nothing the reference or the check needs exists in device memory while the kernel runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import cupy as cp
import numpy as np

from evolve.evaluate.gpu import buffers
from evolve.evaluate.gpu.device import synchronize
from evolve.evaluate.gpu.failure import Fail
from evolve.evaluate.gpu.loading import Loaded
from evolve.evaluate.measurement import Status
from evolve.evaluate.plan import LaunchPlan
from evolve.task.correctness import compare_all, unjudgeable
from evolve.task.stress import Stress
from evolve.task.task import Task, size_label


def check(loaded: Loaded, task: Task, plans: Mapping[str, LaunchPlan], rounds: int,
          seed: Callable[..., int]) -> None:
    """Raise Fail at the first wrong, out-of-bounds or input-modifying launch."""
    for si, sizes in enumerate(task.correctness_sizes):
        label = size_label(sizes)
        plan = plans[label]
        launches: list[tuple[object, Stress | None, str]] = [
            (rnd, None, f"at {label}, round {rnd + 1}") for rnd in range(rounds)]
        launches += [(f"stress {st.name}", st, f"at {label}, stress round {st.name}") for st in task.stress]
        for rnd, stress, at in launches:
            round_seed = seed(si, rnd)
            rng = np.random.default_rng(seed(si, rnd, "fill"))
            for repeat in range(2 if rnd == 0 else 1):
                where = at + (", repeated launch" if repeat else "")
                io = {**buffers.guarded_io(task, sizes), **buffers.guarded_scratch(plan)}
                bufs = buffers.views(io)
                task.fill_inputs(cp, bufs, round_seed, sizes, stress)
                fills = buffers.poison(task, plan, bufs, rng)
                loaded.run(plan, bufs)
                synchronize(f"while running {where}")
                verify(task, sizes, bufs, io, fills, round_seed, where, stress)


def verify(task: Task, sizes: Mapping[str, int], bufs: Mapping[str, cp.ndarray],
           io: Mapping[str, buffers.Guarded], fills: Mapping[str, float | int], input_seed: int,
           where: str, stress: Stress | None = None) -> None:
    """After a launch: guards intact, inputs as made from ``input_seed`` (and ``stress``), outputs
    (and inouts, from their input) right, unless a stress round's reference cannot judge them."""
    if overrun := buffers.first_overrun(io):
        raise Fail(Status.WRONG, f"wrote out of bounds of {overrun} {where}")
    pristine = task.make_inputs(cp, sizes, input_seed, stress)
    for arg in task.read_only:
        name, made = arg.name, pristine[arg.name]
        bits = cp.dtype(f"uint{8 * made.dtype.itemsize}")
        if not bool(cp.array_equal(bufs[name].view(bits), made.view(bits))):
            raise Fail(Status.WRONG, f"input {name} was modified {where}")
    outputs = {a.name: bufs[a.name] for a in task.outputs}
    refs = task.expected(cp, pristine, sizes)
    if stress is not None and unjudgeable(cp, task, refs):
        return
    if reason := compare_all(cp, task, outputs, refs, fills, sizes):
        raise Fail(Status.WRONG, f"{reason} {where}")
