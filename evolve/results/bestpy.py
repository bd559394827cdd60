"""The source of a run's ``best.py``: a fixed program, with no text of the task in its code.

Task text (name, description, argument names, defines) and candidate text (kernel names, the
source) are data that anyone who writes a task file or a kernel controls; pasted into Python they
could break it (``C:\\users`` in a docstring) or run on ``import best`` (a description holding
``\"\"\";stmt;\"\"\"``). So best.py embeds only ``repr()``-quoted strings and one identifier made of
``[A-Za-z0-9_]`` (the function's name); its signature and docstring are built at import time
from best.json, the data beside it (:class:`evolve.results.usage.Kernel`).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence

from evolve.task.task import Task

# names best.py defines itself: a task named like one of them gets a trailing underscore
RESERVED = frozenset({"Path", "Kernel", "RUN", "DEVICE", "kernel", "ModelNew", "register_torch_op"})


def function_name(task: Task) -> str:
    """A plain ASCII identifier for the task's function, clashing with nothing in best.py."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", task.name).strip("_")
    name = f"task_{name}" if not name or name[0].isdigit() else name
    return f"{name}_" if keyword.iskeyword(name) or name in RESERVED else name


def best_py(task: Task, run: str, device: str) -> str:
    """The source of best.py for a run's winner (it reads best.cu and best.json beside it)."""
    fn = function_name(task)
    if not fn.isidentifier() or not fn.isascii():  # function_name's contract, checked once more
        raise ValueError(f"not a plain identifier: {fn!r}")
    return f'''"""A kernel cuda-evolve found, ready to call; help({fn}) says which task, arguments and run.

    import best
    outputs = best.{fn}(*inputs)  # CuPy arrays or CUDA tensors; outputs are allocated
    best.{fn}(*inputs, **outputs)  # or written into the arrays you pass
    model = best.ModelNew(*init_args)  # a drop-in for the task's PyTorch Model (nn.Module)
    model.load_state_dict(reference_model.state_dict())
    op = best.register_torch_op()  # torch.ops.cuda_evolve.{fn}, traced by torch.compile

Sizes are read from the shapes; shapes, dtypes, device and contiguity are checked; the launch is
computed from the sizes by the plan the evaluator used and cached per shape. best.cu is compiled
once for your GPU (NVRTC, cached) and loaded once per GPU. PyTorch tensors are launched on
PyTorch's current stream by pointer (no copy, capturable in a CUDA graph).
Needs cuda-evolve and CuPy where it runs (pip install -e ".[cuda13]" in cuda-evolve's checkout).
"""

from pathlib import Path

from evolve.results.usage import Kernel

RUN = {run!r}
DEVICE = {device!r}
kernel = Kernel.load(Path(__file__).with_name("best.cu"))


def {fn}(*args, **kwargs):
    return kernel(*args, **kwargs)


{fn}.__signature__ = kernel.signature()
{fn}.__doc__ = kernel.describe(RUN, DEVICE)
ModelNew = kernel.model_new()


def register_torch_op(namespace="cuda_evolve"):
    """Register the kernel as the PyTorch op torch.ops.<namespace>.<its name> (inouts in place)."""
    return kernel.torch_op(namespace, {fn!r})
'''


def plain_name(name: str) -> bool:
    """An ASCII identifier that is no keyword: what may be a parameter's or a schema's name."""
    return name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


def op_schema(task: Task, sizes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The custom op's schema (without its name) and the arguments it mutates; a name that is not
    a plain identifier is called by its position (``arg0``...): a schema is no place for text."""
    params, mutated = [], []
    for i, arg in enumerate(task.inputs):
        n = arg.name if plain_name(arg.name) else f"arg{i}"
        if arg.role == "inout":
            params.append(f"Tensor(a{len(mutated)}!) {n}")
            mutated.append(n)
        else:
            params.append(f"Tensor {n}")
    params += [f"int {s if plain_name(s) else f'size{i}'}" for i, s in enumerate(sizes)]
    outs = task.fresh_outputs
    ret = "()" if not outs else "Tensor" if len(outs) == 1 else f"({', '.join(['Tensor'] * len(outs))})"
    return f"({', '.join(params)}) -> {ret}", tuple(mutated)
