"""A PyTorch problem file (KernelBench's format, or a function with its example inputs), evaluated
at chosen sizes.

A problem file is the user's own code, imported like a task's reference module; nothing of an
LLM's runs here. Two forms:

- ``problem.py``: ``class Model(nn.Module)`` with ``forward``, module-level ``get_inputs()`` and
  ``get_init_inputs()`` (the constructor's arguments), module-level integers for the sizes;
- ``ops.py:fn``: a function of tensors; its example inputs come from ``fn_inputs()`` when the file
  has one (several functions in one file), else from ``get_inputs()``.

Sizes are the module's integer globals: evaluating the file at other sizes means running it again
with those assignments changed (so that what the file derives from them, ``input_shape =
(num_classes,)``, follows), calling ``get_inputs()`` / ``get_init_inputs()`` again and building the
Model anew.
Shapes and FLOPs at big sizes are found on PyTorch's ``meta`` device (no memory, no arithmetic).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.machinery
import importlib.util
import inspect
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from evolve.errors import EvolveError, describe

TORCH_DTYPES = {torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
                torch.bfloat16: "bfloat16", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
                torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool"}
NUMBERS = (int, float, bool)  # forward arguments that are not tensors: constants of the task
OVERRIDES = "EVOLVE_TASK"  # an optional module-level dict of the keys below
OVERRIDABLE = {"name", "description", "tolerance", "init", "max_scratch_bytes"}


class NotATask(EvolveError):
    """What the problem computes cannot be judged as a task (one line says why)."""


class _FunctionModel(torch.nn.Module):
    """A function of tensors as a Model without parameters."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


@dataclass
class Instance:
    """The problem built at one size: the Model and its forward's arguments in order, by name:
    tensors (the kernel's inputs) and plain numbers (constants frozen into the kernel)."""

    model: torch.nn.Module
    args: dict[str, Any]

    @property
    def inputs(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.args.items() if isinstance(v, torch.Tensor)}

    @property
    def constants(self) -> dict[str, int | float | bool]:
        return {k: v for k, v in self.args.items() if not isinstance(v, torch.Tensor)}

    def state(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())

    def run(self) -> tuple[torch.Tensor, ...]:
        """The Model's outputs on its arguments, in eval mode without gradients, as a tuple."""
        with torch.no_grad():
            return _tensors(self.model(*self.args.values()))


class Problem:
    """One problem file, imported once (a fresh module object per path: two files may share a name)."""

    def __init__(self, path: Path, function: str | None = None, follow: bool = True) -> None:
        self.path = path.expanduser().resolve()
        self.function = function
        # at other sizes, the file runs again so that what it derives from its sizes follows them
        # (``input_shape = (num_classes,)``); False: only the size globals are set, derived values
        # stay as the file has them (where following them admits no smaller size)
        self.follow = follow
        if not self.path.is_file():
            raise EvolveError(f"problem file {self.path} not found")
        self.source = self.path.read_text()
        self.module = _import(self.path)
        m = self.module
        if function is None:
            needed = ("Model", "get_inputs", "get_init_inputs")
            missing = [n for n in needed if not callable(getattr(m, n, None))]
            if missing:
                raise EvolveError(f"problem file {self.path}: needs {', '.join(missing)} (KernelBench's "
                                  "format), or name a function as FILE.py:FUNCTION")
            self._forward = m.Model.forward
        else:
            fn = getattr(m, function, None)
            examples = getattr(m, f"{function}_inputs", None) or getattr(m, "get_inputs", None)
            if not callable(fn) or not callable(examples):
                raise EvolveError(f"problem file {self.path}: needs a function {function!r} and its example "
                                  f"inputs, {function}_inputs() or get_inputs()")
            self._forward = fn
        self.globals = {k: v for k, v in vars(m).items()
                        if type(v) is int and not k.startswith("_") and k.isidentifier()}
        over = getattr(m, OVERRIDES, None) or {}
        if not isinstance(over, Mapping) or set(over) - OVERRIDABLE:
            raise EvolveError(f"problem file {self.path}: {OVERRIDES} must be a dict of "
                              f"{', '.join(sorted(OVERRIDABLE))}")
        self.overrides = dict(over)
        self._at: dict[tuple[tuple[str, int], ...], ModuleType] = {}  # the file run at other sizes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def input_names(self, count: int) -> list[str]:
        """The forward's parameter names (``x0``, ``x1``... past them, for ``*args``)."""
        params = [p for p in inspect.signature(self._forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params if p.name != "self"] if self.function is None \
            else [p.name for p in params]
        return [names[i] if i < len(names) else f"x{i}" for i in range(count)]

    def init_names(self, count: int) -> list[str]:
        """Model.__init__'s parameter names (``a0``, ``a1``... past them, for ``*args``)."""
        if self.function is not None:
            return []
        params = [p.name for p in inspect.signature(self.module.Model.__init__).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
        return [params[i] if i < len(params) else f"a{i}" for i in range(count)]

    def init_inputs(self, sizes: Mapping[str, int]) -> list[Any]:
        """The constructor's arguments at these sizes (none for a function)."""
        if self.function is not None:
            return []
        with self.at(sizes):
            return list(self.module.get_init_inputs())

    @contextlib.contextmanager
    def at(self, sizes: Mapping[str, int]) -> Iterator[None]:
        """``self.module`` as the file makes it with its size globals set to ``sizes`` (the others as
        the file has them): the file run again with those assignments changed, once per sizes (or,
        not following, those globals set on the module as imported)."""
        changed = {k: int(v) for k, v in sizes.items() if self.globals.get(k) != v}
        if not changed:
            yield
            return
        if not self.follow:
            old_globals = {k: vars(self.module)[k] for k in changed}
            vars(self.module).update(changed)
            try:
                yield
            finally:
                vars(self.module).update(old_globals)
            return
        key = tuple(sorted(changed.items()))
        if key not in self._at:
            self._at[key] = _import(self.path, changed)
        old, self.module = self.module, self._at[key]
        try:
            yield
        finally:
            self.module = old

    def build(self, sizes: Mapping[str, int], device: str = "cpu", seed: int = 0) -> Instance:
        """The Model and its example inputs at these sizes, on ``device`` (``meta``: shapes only)."""
        with self.at(sizes), torch.device(device):
            torch.manual_seed(seed)
            try:
                if self.function is None:
                    init = list(self.module.get_init_inputs())
                    model = self.module.Model(*init)
                    raw = list(self.module.get_inputs())
                else:
                    m = self.module
                    examples = getattr(m, f"{self.function}_inputs", None) or m.get_inputs
                    model, raw = _FunctionModel(getattr(m, str(self.function))), list(examples())
            except NotImplementedError:
                raise
            except Exception as exc:
                where = f"problem file {self.path.name} at {dict(sizes)}"
                raise EvolveError(f"{where}: {describe(exc)}") from None
        for i, v in enumerate(raw):
            if type(v) in NUMBERS:  # a constant of the forward (s = 3.14): frozen into the kernel
                continue
            if not isinstance(v, torch.Tensor):
                raise NotATask(f"get_inputs() gives a {type(v).__name__} at position {i}: only tensors and "
                               "numbers (int, float, bool) are forward arguments a kernel can take")
            if v.dtype not in TORCH_DTYPES:
                raise NotATask(f"input {i} is {v.dtype}, which no kernel argument can hold")
        model.eval()
        return Instance(model, dict(zip(self.input_names(len(raw)), raw, strict=True)))


def _tensors(out: Any) -> tuple[torch.Tensor, ...]:
    """A forward's result as a tuple of tensors; anything else cannot be compared."""
    outs = tuple(out) if isinstance(out, tuple | list) else (out,)
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise NotATask(f"forward returns {type(o).__name__}"
                           f"{f' at position {i}' if len(outs) > 1 else ''}: only tensor outputs can be "
                           "compared")
        if o.dtype not in TORCH_DTYPES:
            raise NotATask(f"forward returns a {o.dtype} tensor, which no kernel argument can hold")
    return outs


def _import(path: Path, sizes: Mapping[str, int] | None = None) -> ModuleType:
    """The problem file as a module of its own (``sizes``: with those module-level assignments
    changed, a fresh module each time; else once per path)."""
    name = "evolve_problem_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if not sizes and name in sys.modules:
        return sys.modules[name]
    loader = _SizedLoader(name, str(path), dict(sizes or {}))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    added = folder not in sys.path
    if added:  # helpers beside the problem file import as they do when it runs as a script
        sys.path.insert(0, folder)
    try:
        loader.exec_module(module)
    except Exception as exc:
        at = f" at {dict(sizes)}" if sizes else ""
        raise EvolveError(f"problem file {path}: importing it{at} failed: {describe(exc)}") from None
    finally:
        if added:
            sys.path.remove(folder)
    vars(module).update({k: v for k, v in (sizes or {}).items() if k not in loader.assigned})
    if not sizes:
        sys.modules[name] = module
    return module


class _SizedLoader(importlib.machinery.SourceFileLoader):
    """Loads the file with its top-level assignments of the size names given set to those values
    (``batch = 16``, ``a, b = 3, 4``); from source every time, never from a bytecode cache."""

    def __init__(self, fullname: str, path: str, sizes: dict[str, int]) -> None:
        super().__init__(fullname, path)
        self.sizes = sizes
        self.assigned: set[str] = set()

    def get_code(self, fullname: str) -> Any:
        path = self.get_filename(fullname)
        tree = ast.parse(self.get_data(path), path)
        if self.sizes:
            for node in tree.body:
                if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    node.value = self._replace(targets, node.value)
        # the import machinery's own step from source to code, on the user's problem file: what
        # importing it always did, with the size literals changed; no generated text reaches it
        return self.source_to_code(ast.fix_missing_locations(tree), path)

    def _replace(self, targets: list[ast.expr], value: ast.expr) -> ast.expr:
        if len(targets) != 1:  # a = b = 3: each name its own value cannot be; left as the file has it
            return value
        target = targets[0]
        if isinstance(target, ast.Name) and target.id in self.sizes:
            self.assigned.add(target.id)
            return ast.copy_location(ast.Constant(self.sizes[target.id]), value)
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                and len(target.elts) == len(value.elts):
            value.elts = [self._replace([t], v) for t, v in zip(target.elts, value.elts, strict=True)]
        return value


def problem_of(cfg: Mapping[str, Any]) -> Problem:
    """The task's problem file, refused where it changed since the task was made from it."""
    t = cfg["torch"]
    problem = Problem(Path(str(t["file"])), t.get("function"), bool(t.get("follow", True)))
    if problem.sha256 != t["sha256"]:
        raise EvolveError(f"problem file {problem.path} changed since the task was made from it")
    return problem


def refuse_unmatchable(p: Problem, sizes: Mapping[str, int]) -> None:
    """Randomness, state updates, inputs changed in place, data-dependent output shapes: checked
    by running the Model for real, in float64, at a correctness size."""
    inst = p.build(sizes, seed=0)
    inst.model.double()
    args = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in inst.args.items()}
    inst = Instance(inst.model, args)
    inputs = inst.inputs
    before = {k: v.clone() for k, v in inst.state().items()}
    given = {k: v.clone() for k, v in inputs.items()}
    torch.manual_seed(1)
    first = inst.run()
    torch.manual_seed(2)
    second = inst.run()
    if changed := [k for k, v in inst.state().items() if not torch.equal(v, before[k])]:
        raise NotATask(f"forward updates the Model's {changed[0]} (a kernel keeps no state between calls)")
    if changed := [k for k, v in inputs.items() if not torch.equal(v, given[k])]:
        raise NotATask(f"forward changes its input {changed[0]} in place")
    if any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(first, second, strict=True)):
        raise NotATask("forward is random (training-mode dropout, torch.rand...): the same inputs must give "
                       "the same outputs")
    shapes = [tuple(o.shape) for o in p.build(sizes, seed=3).run()]
    if shapes != [tuple(o.shape) for o in first]:
        raise NotATask("its output shape depends on the input values (a kernel's outputs have shapes "
                       "known before it runs)")
