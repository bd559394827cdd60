"""The custom op of a tuned kernel: ``torch.ops.<namespace>.<name>``, what ``torch.compile`` traces
(``best.register_torch_op()``, and ModelNew where the compiler traces or autograd records).

Its inputs are tensors, inouts are updated in place, outputs are returned; a fake implementation
gives the compiler their shapes, so a compiled graph holds it without a break, and functional ops
get the forward-only autograd formula (:mod:`evolve.results.forward_only`). It is defined through
``torch.library.Library`` with the launch as its CUDA kernel, not ``torch.library.custom_op``,
whose Python wrapper costs about 10 µs a call more (16.4 against 5.7 µs per call of an op doing
nothing, fake and autograd formula registered, on the CPU). Where the native launcher builds
(:mod:`evolve.results.native`) its CUDA and autograd kernels are C++: a call reaches the launch
without Python.
"""

from __future__ import annotations

from typing import Any

from evolve.results.bestpy import op_schema
from evolve.results.fastcall import bind
from evolve.results.forward_only import forward_only, recorded
from evolve.results.native import NativePath


def register(kernel: Any, namespace: str, name: str) -> tuple[Any, list[Any]]:
    """Define ``namespace::name`` for a ``Kernel`` (``evolve.results.usage``); returns the op and
    what holds its registrations (they last as long as it does)."""
    import torch

    task = kernel.task
    given = kernel.size_parameters(task)
    where = {a.name: i for i, a in enumerate(task.args)}
    inputs = [where[a.name] for a in task.inputs]
    outs = [where[a.name] for a in task.fresh_outputs]
    n = len(task.args)

    def real(*values: Any) -> Any:
        full: list[Any] = [None] * n
        for i, v in zip(inputs, values, strict=False):
            full[i] = v
        made = kernel.launch_torch(full, dict(zip(given, values[len(inputs):], strict=True)))
        return None if not outs else made[outs[0]] if len(outs) == 1 else tuple(made[i] for i in outs)

    def fake(*values: Any) -> Any:
        shapes = {task.args[i].name: tuple(v.shape) for i, v in zip(inputs, values, strict=False)}
        bound = bind(task, shapes, dict(zip(given, values[len(inputs):], strict=True)))
        made = [values[0].new_empty(task.shape(task.args[i], bound), dtype=getattr(torch, task.args[i].dtype))
                for i in outs]
        return None if not made else made[0] if len(made) == 1 else tuple(made)

    schema, mutated = op_schema(task, given)
    lib = torch.library.Library(namespace, "FRAGMENT")
    lib.define(f"{name}{schema}")
    qualname = f"{namespace}::{name}"
    held: list[Any] = [lib]
    path = kernel.torch_path()
    if isinstance(path, NativePath):
        sizes = list(task.correctness_sizes[0])
        op = getattr(getattr(torch.ops, namespace), name)
        slow = None if mutated else recorded(qualname, op)
        held.append(path.extension.register_op(namespace, name, path.launcher, inputs,
                                               [sizes.index(s) for s in given], len(sizes), outs, slow))
    else:
        for key in ("CUDA", "CPU"):  # at CPU too: host tensors get the launch's one-line refusal
            lib.impl(name, real, key)
        if not mutated:  # PyTorch gives autograd formulas to functional ops only
            forward_only(qualname, lib)
    torch.library.register_fake(qualname, fake, lib=lib)
    return getattr(getattr(torch.ops, namespace), name), held
