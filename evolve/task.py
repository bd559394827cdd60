"""A task: what to compute, at which sizes, against which reference, judged how.

Tasks are configuration (``conf/task/*.yaml``, or a task file of the user's anywhere) plus seed
kernels; this module turns that configuration into an object the evaluator uses the same way on
the host (NumPy) and on the GPU (CuPy). An argument is an ``input`` (checked unchanged after
every launch), an ``output`` (pre-filled with a value the kernel must overwrite) or an ``inout``
(made like an input, updated in place, compared like an output).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evolve import dtypes, references
from evolve.errors import EvolveError, SpecError, describe
from evolve.expr import Expr
from evolve.hardware import PEAKS
from evolve.inputs import Init, check_draw, draw, fill, parse_init
from evolve.paths import KERNELS_DIR
from evolve.spec import Variant

ROLES = ("input", "output", "inout")


@dataclass(frozen=True)
class Tolerance:
    """Pass iff |out-ref| <= atol*max|ref| + rtol*|ref| everywhere and rel. L2 error <= l2."""

    atol: float
    rtol: float
    l2: float


@dataclass(frozen=True)
class Arg:
    name: str
    role: str
    dtype: str
    shape: tuple[Expr, ...]
    init: Init
    tolerance: Tolerance | None = None  # this output's own, over the task's


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    args: tuple[Arg, ...]
    correctness_sizes: tuple[dict[str, int], ...]
    timing_sizes: tuple[dict[str, int], ...]
    reference: Callable[..., dict[str, Any]]
    tolerance: Tolerance  # the task's, or its float outputs' dtype default (the loosest)
    bytes_expr: Expr
    flops_expr: Expr
    defines: tuple[tuple[str, str], ...]
    seed_paths: tuple[Path, ...]
    config: Mapping[str, Any]
    peak: str = "fp32"  # the compute peak that bounds it (evolve.hardware.PEAKS), or "memory"

    @property
    def inputs(self) -> tuple[Arg, ...]:
        """The arguments the harness makes values for (inputs and inouts)."""
        return tuple(a for a in self.args if a.role in ("input", "inout"))

    @property
    def outputs(self) -> tuple[Arg, ...]:
        """The arguments compared with the reference (outputs and inouts)."""
        return tuple(a for a in self.args if a.role in ("output", "inout"))

    @property
    def read_only(self) -> tuple[Arg, ...]:
        """Inputs a kernel must leave unchanged."""
        return tuple(a for a in self.args if a.role == "input")

    @property
    def fresh_outputs(self) -> tuple[Arg, ...]:
        """Outputs pre-filled with a value the kernel must overwrite (not inouts)."""
        return tuple(a for a in self.args if a.role == "output")

    def shape(self, arg: Arg, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(e.int_value(sizes) for e in arg.shape)

    def bytes(self, sizes: Mapping[str, int]) -> int:
        return self.bytes_expr.int_value(sizes)

    def flops(self, sizes: Mapping[str, int]) -> int:
        return self.flops_expr.int_value(sizes)

    def tolerance_for(self, arg: Arg) -> Tolerance | None:
        """How an output is compared: None for exact dtypes (integers, bool)."""
        if dtypes.get(arg.dtype).exact:
            return None
        return arg.tolerance or self.tolerance

    def make_inputs(self, xp: Any, sizes: Mapping[str, int], seed: int) -> dict[str, Any]:
        """Fresh inputs for one round, in each argument's storage; the seed is secret to the kernel."""
        out = {a.name: xp.empty(self.shape(a, sizes), dtype=dtypes.storage(a.dtype)) for a in self.inputs}
        self.fill_inputs(xp, out, seed, sizes)
        return out

    def fill_inputs(self, xp: Any, buffers: Mapping[str, Any], seed: int, sizes: Mapping[str, int]) -> None:
        """Write the inputs ``make_inputs`` would make for ``seed`` into existing buffers: the
        same values every time for the same seed, so they can be made again to check them."""
        params = np.random.default_rng(seed)
        for i, arg in enumerate(self.inputs):
            d = draw(arg.init, params, sizes)
            fill(xp, buffers[arg.name], arg.dtype, d, (seed * 1_000_003 + i) % 2**64)

    def expected(self, xp: Any, inputs: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
        """The float64 reference outputs, shaped like the task's outputs (an inout's final value
        under its own name); the reference sees every input widened to float64."""
        dtype = {a.name: a.dtype for a in self.args}
        wide = {k: dtypes.widen(xp, v, dtype[k]) for k, v in inputs.items()}
        ref = self.reference(xp, wide, dict(sizes))
        if not isinstance(ref, Mapping):
            raise EvolveError(f"task {self.name}: reference must return a dict of outputs by name, "
                              f"got {type(ref).__name__}")
        for arg in self.outputs:
            want = self.shape(arg, sizes)
            got = ref.get(arg.name)
            if got is None or tuple(getattr(got, "shape", ())) != want:
                shape = tuple(got.shape) if hasattr(got, "shape") else "nothing"
                raise EvolveError(
                    f"task {self.name}: reference must return {arg.name!r} with shape {want}, got {shape}"
                )
        return {a.name: ref[a.name] for a in self.outputs}

    def seeds(self) -> list[Variant]:
        out = []
        for path in self.seed_paths:
            try:
                out.append(Variant.parse(path.read_text(), name=f"{path.stem}"))
            except SpecError as exc:
                raise EvolveError(f"seed {path}: {exc}") from None
        return out

    def fingerprint(self) -> str:
        """Identifies the task definition, so a resumed study can refuse a changed task (its
        folder may move: where it lives is not part of what it is)."""
        what = {k: _given(v) for k, v in self.config.items() if k != "dir" and v not in (None, "", [], {})}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def _given(value: Any) -> Any:
    """A configuration without the keys left unset (None): what the settings schema fills in for a
    key a task file leaves out does not change the task."""
    if isinstance(value, Mapping):
        return {k: _given(v) for k, v in value.items() if v is not None}
    return [_given(v) for v in value] if isinstance(value, list) else value


def size_label(sizes: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())


def load_task(cfg: Mapping[str, Any], resolve: bool = True) -> Task:
    """Build a Task from its configuration, with errors that name the offending key.

    ``dir`` (set for a task file by :mod:`evolve.tasks`) is the folder its seeds and its
    ``module:function`` reference are found in; every process that rebuilds the task from its
    configuration (the GPU worker, the sanitizer) finds them there too. ``resolve=False`` leaves
    both alone: launching a kernel needs neither."""
    name = str(cfg.get("name", "?"))
    base = Path(str(cfg["dir"])).expanduser().resolve() if cfg.get("dir") else None

    def fail(msg: str) -> EvolveError:
        return EvolveError(f"task {name}: {msg}")

    try:
        args = tuple(_arg(n, a) for n, a in (cfg.get("args") or {}).items())
        sizes = cfg.get("sizes") or {}
        correctness = tuple(_sizes(s) for s in sizes.get("correctness") or [])
        timing = tuple(_sizes(s) for s in sizes.get("timing") or [])
        tol = cfg.get("tolerance")
        tolerance = _tolerance(tol) if tol is not None else _default_tolerance(args)
        traffic = cfg.get("traffic") or {}
        bytes_expr, flops_expr = Expr(traffic["bytes"]), Expr(traffic.get("flops") or 0)
        peak = str(traffic.get("peak") or ("memory" if flops_expr.text == "0" else "fp32"))
        if peak not in ("memory", *PEAKS):
            raise ValueError(f"traffic.peak must be memory or one of {', '.join(PEAKS)}")
    except (KeyError, TypeError, ValueError, SpecError) as exc:
        raise fail(f"malformed configuration ({exc.__class__.__name__}: {exc})") from None
    if not any(a.role != "output" for a in args) or not any(a.role != "input" for a in args):
        raise fail("needs at least one input and one output argument (or an inout one)")
    if not correctness or not timing:
        raise fail("needs sizes.correctness and sizes.timing")
    size_names = set(correctness[0])
    for s in (*correctness, *timing):
        if set(s) != size_names:
            raise fail(f"every size must name {sorted(size_names)}, got {sorted(s)}")
    if clash := size_names & {a.name for a in args}:
        raise fail(f"{sorted(clash)} are both sizes and arguments")
    seeds = cfg.get("seeds") or [] if resolve else []
    seed_paths = tuple(_resolve_seed(name, str(p), base) for p in seeds)
    task = Task(
        name=name,
        description=str(cfg.get("description") or ""),
        args=args,
        correctness_sizes=correctness,
        timing_sizes=timing,
        reference=_resolve_reference(name, str(cfg.get("reference") or name), base) if resolve
        else _unresolved,
        tolerance=tolerance,
        bytes_expr=bytes_expr,
        flops_expr=flops_expr,
        defines=tuple((str(k), str(v)) for k, v in (cfg.get("defines") or {}).items()),
        seed_paths=seed_paths,
        config=dict(cfg),
        peak=peak,
    )
    for s in (*correctness, *timing):
        for a in args:
            try:
                shape = task.shape(a, s)
                d = draw(a.init, np.random.default_rng(0), s) if a.role != "output" else None
            except SpecError as exc:
                raise fail(f"{a.name}: {exc}") from None
            if d is not None and (problem := check_draw(d, a.dtype, int(np.prod(shape)))):
                raise fail(f"{a.name} at {size_label(s)}: {problem}")
    return task


def _unresolved(*_: Any) -> dict[str, Any]:
    raise EvolveError("this task was loaded without its reference (load_task(..., resolve=False))")


def _arg(name: str, a: Mapping[str, Any]) -> Arg:
    if not isinstance(a, Mapping):
        raise ValueError(f"argument {name} must be a mapping {{role, dtype, shape, ...}}")
    role, dtype = a.get("role"), a.get("dtype", "float32")
    if role not in ROLES:
        raise ValueError(f"argument {name}: role must be one of {', '.join(ROLES)}")
    if dtype not in dtypes.DTYPES:
        raise ValueError(f"argument {name}: dtype {dtype!r} is not one of {', '.join(dtypes.DTYPES)}")
    if extra := set(a) - {"role", "dtype", "shape", "init", "tolerance"}:
        raise ValueError(f"argument {name}: unknown key(s) {sorted(extra)}")
    if role == "output" and a.get("init"):
        raise ValueError(f"argument {name}: an output has no init (its values come from the kernel)")
    try:
        init = parse_init(a.get("init"), dtype)
    except ValueError as exc:
        raise ValueError(f"argument {name}: {exc}") from None
    return Arg(
        name=name,
        role=role,
        dtype=dtype,
        shape=tuple(Expr(e) for e in a["shape"]),
        init=init,
        tolerance=_tolerance(a["tolerance"]) if a.get("tolerance") is not None else None,
    )


def _tolerance(t: Mapping[str, Any]) -> Tolerance:
    tol = Tolerance(float(t["atol"]), float(t["rtol"]), float(t["l2"]))
    if min(tol.atol, tol.rtol, tol.l2) < 0:
        raise ValueError("tolerances must not be negative")
    return tol


def _default_tolerance(args: tuple[Arg, ...]) -> Tolerance:
    """The loosest default of the float outputs' dtypes (float32's when there are none)."""
    defaults = [dtypes.get(a.dtype).tolerance for a in args if a.role != "input"]
    tols = [t for t in defaults if t is not None] or [dtypes.get("float32").tolerance]
    return Tolerance(*(max(getattr(t, k) for t in tols) for k in ("atol", "rtol", "l2")))


def _sizes(s: Mapping[str, Any]) -> dict[str, int]:
    out = {}
    for k, v in s.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"size {k}={v!r} must be a positive integer")
        out[str(k)] = v
    return out


def _resolve_seed(task: str, p: str, base: Path | None) -> Path:
    """Seeds are paths: absolute, or relative to the task file's folder, to kernels/ (the
    built-in tasks' seeds) or to the working directory, in that order."""
    places = [*([base] if base else []), KERNELS_DIR, Path.cwd()]
    for path in (Path(p).expanduser(), *(d / p for d in places)):
        if path.is_absolute() and path.is_file():
            return path.resolve()
    raise EvolveError(f"task {task}: seed kernel {p!r} not found (looked in "
                      f"{', '.join(str(d) for d in places)})")


def _resolve_reference(task: str, ref: str, base: Path | None) -> Callable[..., dict[str, Any]]:
    """A built-in reference by name, or ``module:function`` imported from the task's folder
    (first on the import path, as a script's own folder is) or from anywhere importable."""
    module, _, func = ref.rpartition(":")
    if not module:
        obj = getattr(references, func, None)
        if not callable(obj):
            raise EvolveError(f"task {task}: reference {ref!r} is not a built-in reference; name your "
                              "own as module:function (module.py beside the task file)")
        return obj
    mod = _import(task, module, base)
    obj = getattr(mod, func, None)
    if not callable(obj):
        raise EvolveError(f"task {task}: reference module {module} ({getattr(mod, '__file__', '?')}) "
                          f"has no function {func!r}")
    return obj


def _import(task: str, module: str, base: Path | None) -> Any:
    if base is not None:
        _use_folder(base)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            where = f"{base} and " if base else ""
            raise EvolveError(f"task {task}: reference module {module!r} not found "
                              f"(looked in {where}the Python path)") from None
        raise EvolveError(f"task {task}: importing reference module {module!r} failed: "
                          f"{describe(exc)}") from None
    except Exception as exc:  # the user's module raised: show what, and where
        raise EvolveError(f"task {task}: importing reference module {module!r} failed: "
                          f"{describe(exc)}") from None


_task_folders: list[str] = []  # put on the import path by _use_folder


def _use_folder(base: Path) -> None:
    """Put the task's folder first on the import path, instead of any other task's folder: a
    module of the same name (``refs``) from another task is not this task's module."""
    folder = str(base)
    for other in [d for d in _task_folders if d != folder]:
        _task_folders.remove(other)
        while other in sys.path:
            sys.path.remove(other)
        for name, mod in list(sys.modules.items()):
            if (getattr(mod, "__file__", None) or "").startswith(other + "/"):
                del sys.modules[name]
    if folder not in _task_folders:
        _task_folders.append(folder)
        sys.path.insert(0, folder)


def builtin_task(name: str) -> Task:
    """A task of ``conf/task/`` by name, outside a Hydra app (benchmarks, tools)."""
    import yaml

    from evolve.paths import CONF_DIR

    path = CONF_DIR / "task" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise EvolveError(f"unknown task {name!r}; built-in tasks: {known}")
    return load_task({**yaml.safe_load(path.read_text()), "dir": str(path.parent)})
