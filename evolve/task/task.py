"""A task: what to compute, at which sizes, against which reference, judged how.

Tasks are configuration (``conf/task/*.yaml``, or a task file of the user's anywhere) plus seed
kernels; this module turns that configuration into an object the evaluator uses the same way on
the host (NumPy) and on the GPU (CuPy). An argument is an ``input`` (checked unchanged after
every launch), an ``output`` (pre-filled with a value the kernel must overwrite) or an ``inout``
(made like an input, updated in place, compared like an output).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evolve import dtypes
from evolve.errors import EvolveError, SpecError
from evolve.expr import Expr
from evolve.hardware import PEAKS
from evolve.kernel.spec import Variant
from evolve.task.inputs import Draw, Init, check_draw, draw, fill, parse_init
from evolve.task.resolve import resolve_reference, resolve_seed
from evolve.task.stress import Stress, stressed
from evolve.task.stress import parse as parse_stress

ROLES = ("input", "output", "inout")
MAX_SCRATCH_BYTES = 1 << 34  # a task's default max_scratch_bytes (16 GiB; the GPU's memory bounds it too)


@dataclass(frozen=True)
class Tolerance:
    """Pass iff |out-ref| <= atol*max|ref| + rtol*|ref| everywhere and rel. L2 error <= l2.

    ``accumulates`` (a size expression: the length of the sum each output element is, e.g. K of
    a GEMM) makes ``l2`` the bound of a one-term sum, growing as its square root: float32's
    rounding error of an honest sum grows so, while a split-precision product (bf16x3) is off by
    as much at every K, so only a bound that is tight at short sums can refuse it."""

    atol: float
    rtol: float
    l2: float
    accumulates: Expr | None = None

    def at(self, sizes: Mapping[str, int] | None) -> Tolerance:
        """The bounds at these sizes (``l2`` grown by sqrt(accumulates)); without sizes, those of
        a one-term sum (the tightest)."""
        if self.accumulates is None or sizes is None:
            return self
        terms = max(1, self.accumulates.int_value(sizes))
        return Tolerance(self.atol, self.rtol, self.l2 * terms ** 0.5)


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
    max_scratch_bytes: int = MAX_SCRATCH_BYTES  # a kernel's scratch buffers in all, at any size
    stress: tuple[Stress, ...] = ()  # one more correctness round per size each (evolve.task.stress)

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

    def tolerance_for(self, arg: Arg, sizes: Mapping[str, int] | None = None) -> Tolerance | None:
        """How an output is compared (at ``sizes``, needed when the tolerance grows with them):
        None for exact dtypes (integers, bool)."""
        if dtypes.get(arg.dtype).exact:
            return None
        return (arg.tolerance or self.tolerance).at(sizes)

    def make_inputs(self, xp: Any, sizes: Mapping[str, int], seed: int,
                    stress: Stress | None = None) -> dict[str, Any]:
        """Fresh inputs for one round, in each argument's storage; the seed is secret to the kernel."""
        out = {a.name: xp.empty(self.shape(a, sizes), dtype=dtypes.storage(a.dtype)) for a in self.inputs}
        self.fill_inputs(xp, out, seed, sizes, stress)
        return out

    def fill_inputs(self, xp: Any, buffers: Mapping[str, Any], seed: int, sizes: Mapping[str, int],
                    stress: Stress | None = None) -> None:
        """Write the inputs ``make_inputs`` would make for ``seed`` (and ``stress``) into existing
        buffers: the same values every time, so they can be made again to check them."""
        params = np.random.default_rng(seed)
        for i, arg in enumerate(self.inputs):
            d = self.draw(arg, params, sizes, stress)
            fill(xp, buffers[arg.name], arg.dtype, d, (seed * 1_000_003 + i) % 2**64)

    def draw(self, arg: Arg, params: np.random.Generator, sizes: Mapping[str, int],
             stress: Stress | None = None) -> Draw:
        """One round's parameters of one input: its own init's, or the stress round's."""
        own = dict(stress.inits) if stress is not None else {}
        d = draw(own.get(arg.name, arg.init), params, sizes)
        if stress is not None and stress.generic:
            d = stressed(arg.init, d, stress.name, arg.dtype, (params.random(), params.random()))
        return d

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
        if isinstance(what.get("torch"), Mapping):  # a problem file is known by its sha256
            what["torch"] = {k: v for k, v in what["torch"].items() if k != "file"}
            # and not by what its Model's float32 run decided (the stress rounds and held-out sizes
            # it can judge, :mod:`evolve.task.torch_calibration`): that may differ between the
            # proposer's machine and the evaluator's; each judges by its own
            what.pop("stress", None)
            if isinstance(what.get("sizes"), Mapping):
                what["sizes"] = {k: v for k, v in what["sizes"].items() if k != "holdout"}
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

    ``dir`` (set for a task file by :mod:`evolve.task.files`) is the folder its seeds and its
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
        given = cfg.get("max_scratch_bytes")
        max_scratch = MAX_SCRATCH_BYTES if given is None else int(given)
        if max_scratch < 0:
            raise ValueError("max_scratch_bytes must not be negative")
        stress = parse_stress(cfg.get("stress"), {a.name: a.dtype for a in args if a.role != "output"})
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
    seed_paths = tuple(resolve_seed(name, str(p), base) for p in seeds)
    task = Task(
        name=name,
        description=str(cfg.get("description") or ""),
        args=args,
        correctness_sizes=correctness,
        timing_sizes=timing,
        reference=resolve_reference(name, cfg, base) if resolve else _unresolved,
        tolerance=tolerance,
        bytes_expr=bytes_expr,
        flops_expr=flops_expr,
        defines=tuple((str(k), str(v)) for k, v in (cfg.get("defines") or {}).items()),
        seed_paths=seed_paths,
        config=dict(cfg),
        peak=peak,
        max_scratch_bytes=max_scratch,
        stress=stress,
    )
    for s in (*correctness, *timing):
        for a in args:
            for st in (None, *(st for st in stress if s in correctness and not st.generic)):
                try:
                    shape = task.shape(a, s)
                    d = task.draw(a, np.random.default_rng(0), s, st) if a.role != "output" else None
                except SpecError as exc:
                    raise fail(f"{a.name}: {exc}") from None
                if d is not None and (problem := check_draw(d, a.dtype, int(np.prod(shape)))):
                    where = f" (stress round {st.name})" if st else ""
                    raise fail(f"{a.name} at {size_label(s)}{where}: {problem}")
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
    if extra := set(t) - {"atol", "rtol", "l2", "accumulates"}:
        raise ValueError(f"tolerance takes atol, rtol, l2 and accumulates, not {sorted(extra)}")
    grows = Expr(t["accumulates"]) if t.get("accumulates") is not None else None
    tol = Tolerance(float(t["atol"]), float(t["rtol"]), float(t["l2"]), grows)
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


def builtin_task(name: str) -> Task:
    """A task of ``conf/task/`` by name, outside a Hydra app (benchmarks, tools)."""
    import yaml

    from evolve.paths import CONF_DIR

    path = CONF_DIR / "task" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise EvolveError(f"unknown task {name!r}; built-in tasks: {known}")
    return load_task({**yaml.safe_load(path.read_text()), "dir": str(path.parent)})
