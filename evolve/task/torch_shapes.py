"""A PyTorch problem file evaluated at sizes, as a task is made from it (:mod:`evolve.task.torch_task`):
its arguments' names, their shapes and dtypes on PyTorch's meta device (no memory, no arithmetic),
whether it can be built and run at a size, and its FLOPs there."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch.utils.flop_counter import FlopCounterMode

from evolve.errors import EvolveError, describe
from evolve.task.torch_problem import TORCH_DTYPES, Instance, NotATask, Problem

ELEMENTS = 1 << 21  # at most this many elements in all of a correctness size's tensors
FLOPS = "model_flops"
Shapes = dict[str, tuple[str, tuple[int, ...]]]  # argument -> (dtype, shape), outputs included


class Names:
    """Argument names: the forward's parameters, the state_dict's keys ('.' -> '_'), the outputs;
    none the name of a size or of another argument."""

    def __init__(self, p: Problem, timing: Mapping[str, int]) -> None:
        inst = meta(p, timing)
        self.constants = inst.constants  # forward's numbers (s = 3.14), frozen into the kernel
        self.order = list(inst.args)
        taken = set(timing) | {FLOPS} | set(self.constants)
        self.inputs = {_unique(n, taken): n for n in inst.inputs}
        self.state = {_unique(k.replace(".", "_"), taken): k for k in inst.state()}
        outs = run_meta(p, inst)
        self.outputs = {_unique("out" if len(outs) == 1 else f"out{i}", taken): i for i in range(len(outs))}


def _unique(name: str, taken: set[str]) -> str:
    name = name if name.isidentifier() else "a_" + "".join(c if c.isalnum() else "_" for c in name)
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def meta(p: Problem, sizes: Mapping[str, int]) -> Instance:
    return p.build(sizes, device="meta")


def run_meta(p: Problem, inst: Instance) -> tuple[torch.Tensor, ...]:
    try:
        return inst.run()
    except NotImplementedError as exc:
        if "data-independent" in str(exc) or "data-dependent" in str(exc):
            raise NotATask("its output shape depends on the input values (a kernel's outputs have shapes "
                           "known before it runs)") from None
        raise EvolveError(f"problem file {p.path.name}: forward cannot run on PyTorch's meta device "
                          f"({str(exc).splitlines()[0]})") from None
    except NotATask:
        raise
    except Exception as exc:
        if isinstance(exc, RuntimeError) and "meta tensor" in str(exc):
            raise NotATask("forward reads a tensor's value into Python (.item(), float(), an if on the "
                           "data): what a kernel computes must not hang on host decisions") from None
        raise EvolveError(f"problem file {p.path.name}: forward fails ({describe(exc)})") from None


def shapes_at(p: Problem, sizes: Mapping[str, int], names: Names) -> Shapes:
    inst = meta(p, sizes)
    state, outs = inst.state(), run_meta(p, inst)
    if len(outs) != len(names.outputs):
        raise NotATask(f"forward returns {len(outs)} tensors at {label(sizes)}, {len(names.outputs)} at "
                       "the file's sizes")
    out: Shapes = {}
    for group, tensors in ((names.inputs, inst.inputs), (names.state, state)):
        for arg, key in group.items():
            out[arg] = (TORCH_DTYPES[tensors[key].dtype], tuple(tensors[key].shape))
    for arg, i in names.outputs.items():
        out[arg] = (TORCH_DTYPES[outs[i].dtype], tuple(outs[i].shape))
    return out


def try_at(p: Problem, sizes: Mapping[str, int], names: Names) -> Shapes | None:
    """The shapes at these sizes, or None where the file cannot be built or run there. Sizes small
    enough to be correctness sizes are also run for real on the CPU: the meta device does not make
    every check (a transposed convolution with an empty output, hidden by a reduction after it,
    passes there and raises on real tensors)."""
    try:
        shapes = shapes_at(p, sizes, names)
    except (EvolveError, NotImplementedError, RuntimeError):
        return None
    if set(shapes) != set(names.inputs) | set(names.state) | set(names.outputs) \
            or any(math.prod(s) == 0 for _, s in shapes.values()):
        return None
    if elements(shapes) <= ELEMENTS:
        try:
            p.build(sizes).run()
        except (EvolveError, RuntimeError, ValueError, IndexError):
            return None
    return shapes


def elements(shapes: Shapes) -> int:
    return sum(math.prod(s) for _, s in shapes.values())


def count_flops(p: Problem, sizes: Mapping[str, int]) -> int:
    """The Model's FLOPs at these sizes, as PyTorch's counter sees them on the meta device."""
    inst = meta(p, sizes)
    counter = FlopCounterMode(display=False)
    with counter:
        inst.run()
    return int(counter.get_total_flops())


def label(s: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in s.items())
