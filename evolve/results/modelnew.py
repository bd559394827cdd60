"""``ModelNew``: the winner as a drop-in ``torch.nn.Module`` for the task's PyTorch ``Model``.

A task made from a PyTorch module says how its arguments stand to the Model in a ``module``
entry (written by whoever makes the task; absent, ModelNew takes no constructor arguments and
``forward`` takes the task's inputs in order)::

    module:
      init:                                 # Model.__init__'s parameters, in order
        - {name: features, size: cols}      # shapes the parameters: any value, it is that size
        - {name: shape, size: [rows, cols]} # a tuple of sizes (nn.LayerNorm's normalized_shape)
        - {name: eps, value: 1.0e-5}        # frozen into the kernel: this value (the default) only
      forward: [x, {name: s, value: 2.5}]   # Model.forward's parameters in order: task inputs, and
                                            # numbers frozen into the kernel (checked per call)
      parameters: {gamma: weight, beta: bias}   # task input: the Model's state_dict key

Every task input is forwarded or a parameter. The parameters are ``nn.Parameter``s under their
state_dict keys (dotted keys make submodules), so ``ModelNew(*args).load_state_dict(
model.state_dict())`` loads a Model's; they are inference-only (``requires_grad=False``: the
kernel has no backward). ``forward`` returns the task's outputs and inouts (one, or a tuple) by
the fast path (:mod:`evolve.results.fastcall`), and through the custom op when ``torch.compile``
traces it, so a compiled model has no graph break, or when an input requires a gradient, so that
autograd refuses a backward through the kernel (:mod:`evolve.results.forward_only`). The op is
registered when a ModelNew is made (not while the compiler traces), once per kernel and process, as
``torch.ops.cuda_evolve_model.<task>_<digest of the kernel, its tunables and the task>``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evolve.errors import SpecError
from evolve.results.bestpy import plain_name
from evolve.task.task import Task

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class InitParam:
    name: str
    size: str | tuple[str, ...] | None  # the size (or tuple of sizes) this argument gives, or
    # None: a value frozen into the kernel
    value: Any = None


@dataclass(frozen=True)
class ModuleSpec:
    init: tuple[InitParam, ...]
    forward: tuple[str, ...]  # task inputs, in forward's order
    parameters: tuple[tuple[str, str], ...]  # (task input, state_dict key)
    # forward's numbers frozen into the kernel (s = 3.14): (position among forward's arguments,
    # name, value); the task inputs take the other positions
    constants: tuple[tuple[int, str, Any], ...] = ()


def module_spec(task: Task) -> ModuleSpec:
    """The task's ``module`` entry, checked; ValueError says what is wrong in one line."""
    raw = task.config.get("module")
    inputs = [a.name for a in task.inputs]
    if raw is None:
        return ModuleSpec((), tuple(inputs), ())
    if not isinstance(raw, Mapping) or set(raw) - {"init", "forward", "parameters"}:
        raise ValueError(f"task {task.name}: module must be a mapping of init, forward and parameters")
    init = []
    for p in raw.get("init") or ():
        if not isinstance(p, Mapping) or not plain_name(str(p.get("name", ""))) or (
                "size" in p) == ("value" in p) or set(p) - {"name", "size", "value"}:
            raise ValueError(f"task {task.name}: module.init entries are {{name, size}} or {{name, value}}, "
                             f"got {p!r}")
        size = p.get("size")
        if isinstance(size, list | tuple):
            size = tuple(size)
        if "size" in p and (not size or any(s not in task.correctness_sizes[0]
                                            for s in (size if isinstance(size, tuple) else (size,)))):
            raise ValueError(f"task {task.name}: module.init {p['name']} gives size {p['size']!r}, not one "
                             f"of {', '.join(task.correctness_sizes[0])}")
        init.append(InitParam(str(p["name"]), size, p.get("value")))
    forward_raw = list(raw.get("forward", inputs))
    constants = tuple((i, str(e.get("name", "")), e.get("value")) for i, e in enumerate(forward_raw)
                      if isinstance(e, Mapping))
    if bad := [c for c in constants if not plain_name(c[1]) or type(c[2]) not in (int, float, bool)]:
        raise ValueError(f"task {task.name}: module.forward's constants are {{name, value}} with a number, "
                         f"got {forward_raw[bad[0][0]]!r}")
    forward = tuple(str(n) for n in forward_raw if not isinstance(n, Mapping))
    parameters = tuple((str(k), str(v)) for k, v in (raw.get("parameters") or {}).items())
    named = [*forward, *(k for k, _ in parameters)]
    if sorted(named) != sorted(inputs):
        raise ValueError(f"task {task.name}: module.forward and module.parameters must name each input "
                         f"({', '.join(inputs)}) once, got {', '.join(named) or 'none'}")
    if bad := [v for _, v in parameters if not _KEY.fullmatch(v)]:
        raise ValueError(f"task {task.name}: {bad[0]!r} is not a state_dict key")
    if bad := [n for n in (*forward, *(p.name for p in init)) if not plain_name(n)]:
        raise ValueError(f"task {task.name}: {bad[0]!r} cannot be a Python parameter name")
    return ModuleSpec(tuple(init), forward, parameters, constants)


def _records(inputs: tuple[Any, ...]) -> bool:
    """Whether autograd would record a call on these inputs (a loop: any() of a generator costs
    more per call)."""
    for v in inputs:  # noqa: SIM110
        if getattr(v, "requires_grad", False):
            return True
    return False


def model_class(kernel: Any) -> Any:
    """The ModelNew class for a ``Kernel`` (``evolve.results.usage``); None where the task's
    module entry is absent and PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    task: Task = kernel.task
    spec = module_spec(task)
    index = {a.name: i for i, a in enumerate(task.args)}
    by_name = {a.name: a for a in task.args}
    forward_at = [index[n] for n in spec.forward]
    constants = spec.constants
    n_forward = len(forward_at) + len(constants)
    names = list(spec.forward)  # forward's parameter names, for its one-line errors
    for i, name, _ in constants:
        names.insert(i, name)
    tensor_at = [i for i in range(n_forward) if i not in {c[0] for c in constants}]
    n_args, returned = len(task.args), kernel._returned
    given = kernel.size_parameters(task)
    op_inputs = [index[a.name] for a in task.inputs]
    fresh_at = {index[a.name] for a in task.fresh_outputs}
    unset, one = [None] * n_args, len(returned) == 1

    def task_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """Forward's arguments less its numbers, each checked against the one the kernel holds."""
        for i, name, value in constants:
            if inputs[i] != value:
                raise ValueError(f"ModelNew of {task.name} was tuned for {name}={value!r}, got {inputs[i]!r}")
        return tuple(inputs[i] for i in tensor_at)

    is_compiling, grad_enabled = torch.compiler.is_compiling, torch.is_grad_enabled
    P = inspect.Parameter
    init_signature = inspect.Signature([P(p.name, P.POSITIONAL_OR_KEYWORD, **(
        {"default": p.value} if p.size is None else {})) for p in spec.init])

    class ModelNew(torch.nn.Module):
        __doc__ = f"The tuned kernel of task {task.name} as a module (see evolve.results.modelnew)."

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()
            try:
                bound = init_signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"ModelNew{init_signature}: {exc}") from None
            bound.apply_defaults()
            self.sizes: dict[str, int] = {}
            for p in spec.init:
                v = bound.arguments[p.name]
                if isinstance(p.size, tuple):
                    self.sizes.update(_sizes_of(task.name, p.name, p.size, v))
                elif p.size is not None:
                    self.sizes[p.size] = operator.index(v)
                elif _stored(v) != p.value:
                    raise ValueError(f"ModelNew of {task.name} was tuned for {p.name}={p.value!r}, got {v!r}")
            self._slots = []
            for arg_name, key in spec.parameters:
                arg = by_name[arg_name]
                missing = sorted({e.text for e in arg.shape} - set(self.sizes))
                try:
                    shape = task.shape(arg, self.sizes)
                except SpecError:
                    raise ValueError(f"ModelNew of {task.name}: parameter {key} has shape "
                                     f"[{', '.join(e.text for e in arg.shape)}] and no constructor "
                                     f"argument gives {', '.join(missing)}") from None
                owner, leaf = _owner(self, key)
                owner.register_parameter(leaf, torch.nn.Parameter(
                    torch.zeros(shape, dtype=getattr(torch, arg.dtype)), requires_grad=False))
                self._slots.append((index[arg_name], owner, leaf))
            self._sizes_call = {s: v for s, v in self.sizes.items() if s in given}
            self._op = _op(kernel)  # registered here, not while torch.compile traces forward

        def forward(self, *inputs: Any) -> Any:
            # per call, only what a launch needs: this path's cost is the module's overhead (issue 26)
            if len(inputs) != n_forward:
                raise TypeError(f"ModelNew.forward takes {n_forward} inputs "
                                f"({', '.join(names)}), got {len(inputs)}")
            if constants:
                inputs = task_inputs(inputs)
            # the custom op where the compiler traces (by its fake) or autograd records (its
            # forward-only formula: a backward through the kernel fails instead of losing the gradient)
            if is_compiling() or (grad_enabled() and _records(inputs)):
                return self._through_op(inputs)
            values = [*unset]
            for i, v in zip(forward_at, inputs):  # noqa: B905 (the lengths were checked)
                values[i] = v
            for i, owner, leaf in self._slots:
                values[i] = owner._parameters[leaf]
            values = kernel.launch_torch(values, self._sizes_call)
            return values[returned[0]] if one else tuple(values[i] for i in returned)

        def _through_op(self, inputs: tuple[Any, ...]) -> Any:
            values: list[Any] = [*unset]
            for i, v in zip(forward_at, inputs, strict=True):
                values[i] = v
            for i, owner, leaf in self._slots:
                values[i] = getattr(owner, leaf)
            made = self._op(*[values[i] for i in op_inputs], *[self.sizes[s] for s in given])
            fresh = iter(made if isinstance(made, tuple) else () if made is None else (made,))
            result = tuple(next(fresh) if i in fresh_at else values[i] for i in returned)
            return result[0] if len(result) == 1 else result

    ModelNew.__init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [P("self", P.POSITIONAL_OR_KEYWORD), *init_signature.parameters.values()])
    return ModelNew


def _sizes_of(task_name: str, name: str, names: tuple[str, ...], value: Any) -> dict[str, int]:
    """The sizes a tuple argument gives (``normalized_shape=(64, 256)``), one per element."""
    if not isinstance(value, tuple | list) or len(value) != len(names):
        raise ValueError(f"ModelNew of {task_name}: {name} must be a tuple of {len(names)} integers "
                         f"({', '.join(names)}), got {value!r}")
    return {n: operator.index(v) for n, v in zip(names, value, strict=True)}


def _stored(value: Any) -> Any:
    """A constructor argument as the task stores it (its configuration is JSON: a tuple, such as
    ``bias_shape=(128, 1, 1)`` or a ``torch.Size``, is a list there)."""
    return [_stored(v) for v in value] if isinstance(value, tuple | list) else value


def _owner(module: Any, key: str) -> tuple[Any, str]:
    """The submodule a dotted state_dict key's parameter lives in (made where missing)."""
    import torch

    *path, leaf = key.split(".")
    for part in path:
        child = module._modules.get(part)
        if child is None:
            child = torch.nn.Module()
            module.add_module(part, child)
        module = child
    return module, leaf


_ops: dict[str, Any] = {}  # by kernel: one registration per process (custom ops cannot be redefined)


def _op(kernel: Any) -> Any:
    """The kernel's custom op, named by what it computes, so that two best.py files of different
    runs may be loaded together and two of the same run share it."""
    from evolve.results.bestpy import function_name

    digest = hashlib.sha256(json.dumps([kernel.source, kernel.tunables, dict(kernel.task.config)],
                                       sort_keys=True, default=str).encode()).hexdigest()[:12]
    if digest not in _ops:
        _ops[digest] = kernel.torch_op("cuda_evolve_model", f"{function_name(kernel.task)}_{digest}")
    return _ops[digest]
