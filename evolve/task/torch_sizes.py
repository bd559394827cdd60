"""The sizes of a task made from a PyTorch problem file that no argument's shape says (an output
extent that follows others, such as a convolution's output height, and ``model_flops``), at sizes
the task was not made at: the problem file evaluated there on PyTorch's meta device, as when the
task was made. ``best.py`` needs them for a shape it has not seen (its outputs' shapes, the plan)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evolve.task.torch_problem import problem_of
from evolve.task.torch_shapes import FLOPS, count_flops


def derived_sizes(cfg: Mapping[str, Any], sizes: Mapping[str, int], wanted: Iterable[str]) -> dict[str, int]:
    """The ``wanted`` sizes at the problem's own ``sizes`` (its module-level integers)."""
    t = cfg["torch"]
    problem = problem_of(cfg)
    plain = {k: int(sizes[k]) for k in t["sizes"]}
    inst = problem.build(plain, device="meta")
    outs = inst.run()
    state = inst.state()
    shapes = {**{a: tuple(inst.inputs[k].shape) for a, k in t["inputs"].items()},
              **{a: tuple(state[k].shape) for a, k in t["state"].items()},
              **{a: tuple(o.shape) for a, o in zip(t["outputs"], outs, strict=True)}}
    found: dict[str, int] = {}
    for name in wanted:
        arg, _, j = name.rpartition("_d")
        if name == FLOPS:
            found[name] = count_flops(problem, plain)
        elif arg in shapes and j.isdigit() and int(j) < len(shapes[arg]):
            found[name] = int(shapes[arg][int(j)])
    return found
