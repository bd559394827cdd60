"""A task from a PyTorch problem file (:mod:`evolve.task.torch_problem`), with no other file.

``task_config`` turns ``problem.py`` (or ``ops.py:fn``) into the configuration a YAML task file
would hold, so every process rebuilds the same task from it (the file is imported again there):

- arguments: the example inputs (signed normal floats, never U[0,1), unless the reference is NaN
  on them: then the example's own range; integers in the range the example has, indices up to
  the size they index), the Model's parameters and buffers (drawn in
  the range the Model initialises them to; a constant c as U[c/2, 3c/2], zero as signed normal) and
  the forward's outputs (``out``, or ``out0``, ``out1``...; 0-d ones too);
- sizes: the integer globals whose change reshapes an input, parameter or buffer; the file's own
  values are the timing size; correctness and held-out sizes are smaller ones (awkward included)
  the file is evaluated at again; an extent that is no plain size, nor a product of two, nor a
  constant (a conv's output height) is a derived size of its own, known at every size; so are
  the FLOPs (``model_flops``, from ``torch.utils.flop_counter``) when there are any;
- the reference is the Model itself, in float64, ``Model.eval()``, ``no_grad()``
  (:class:`evolve.task.torch_reference.TorchReference`);
  the tolerance is the output dtype's (``EVOLVE_TASK = {"tolerance": ...}`` overrides it; so does
  ``"init": {arg: {...}}`` an argument's distribution, ``"max_scratch_bytes"`` the scratch a
  kernel may declare), bytes are those of the tensors;
- the description is the problem file's source: with the argument table, the LLM's specification.
What cannot be a task is refused with one line (:class:`~evolve.task.torch_problem.NotATask`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.task.torch_draws import input_init, positive_where_needed, state_init
from evolve.task.torch_problem import Instance, NotATask, Problem, refuse_unmatchable
from evolve.task.torch_shapes import (
    ELEMENTS,
    FLOPS,
    Names,
    Shapes,
    count_flops,
    elements,
    label,
    meta,
    shapes_at,
    try_at,
)

PEAK = {"float32": "fp32", "float64": "fp64", "float16": "fp16_tensor", "bfloat16": "bf16_tensor"}
_PRIMES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43)



def task_config(path: Path, function: str | None = None) -> dict[str, Any]:
    """The task configuration of a problem file; EvolveError (NotATask) says why there is none."""
    p = Problem(path, function)
    try:
        try:
            return _config(p)
        except NoSmallerSize as first:
            try:  # values the file derives from its sizes, kept as they are, may admit smaller sizes
                return _config(Problem(path, function, follow=False))
            except NoSmallerSize:
                pass
            try:  # sizes tied by a relation: divided together
                return _config(p, together=True)
            except NoSmallerSize:
                raise first from None
    except NotATask as exc:
        raise NotATask(f"{p.path.name}{f':{function}' if function else ''} cannot be a task: {exc}") from None


class NoSmallerSize(NotATask):
    """No size smaller than the file's own can be built and run."""


def _config(p: Problem, together: bool = False) -> dict[str, Any]:
    timing = _size_globals(p)
    names = Names(p, timing)
    points = [(timing, shapes_at(p, timing, names))]  # every size evaluated, with its shapes
    for k in timing:  # one size changed at a time: which extent follows which size
        for v in (timing[k] + 1, 2 * timing[k]):
            if (found := try_at(p, s := {**timing, k: v}, names)) is not None:
                points.append((s, found))
                break
    correctness = (_scaled if together else _smaller)(p, timing, names, points)
    held = _held_out(p, correctness, timing, names, points)
    shapes = {label(s): found for s, found in points}
    flops = {label(s): count_flops(p, s) for s in (timing, *correctness, *held)}
    # FLOPs where PyTorch's counter sees them at every size: an einsum lowered to a multiply and a
    # sum at some sizes counts 0 there, and a size of 0 FLOPs is no size
    counted = all(flops.values())
    refuse_unmatchable(p, correctness[0])
    for s in (*correctness, *held):
        if (there := meta(p, s).constants) != names.constants:
            k = next(k for k in names.constants if there.get(k) != names.constants[k])
            raise NotATask(f"get_inputs() gives {k} = {there.get(k)!r} at {label(s)} but "
                           f"{names.constants[k]!r} at the file's sizes: a number the kernel is built "
                           "with must not change with the sizes")
    first = points[0][1]
    biggest = max(correctness, key=lambda s: elements(shapes[label(s)]))
    at = timing if elements(first) <= 1 << 26 else biggest  # parameters' values, not only shapes
    real = p.build(at)
    exprs = {arg: _dims(arg, points, timing) for arg in first}
    derived = {d for e in exprs.values() for d in e if d.startswith("_")}

    def sizes(s: dict[str, int]) -> dict[str, int]:
        out = dict(s)
        for d in sorted(derived):
            arg, j = d[1:].rsplit("_d", 1)
            out[f"{arg}_d{j}"] = shapes[label(s)][arg][1][int(j)]
        if counted:
            out[FLOPS] = flops[label(s)]
        return out

    args: dict[str, Any] = {}
    state = real.state()
    for arg, (dtype, _) in first.items():
        spec: dict[str, Any] = {"role": "output" if arg in names.outputs else "input", "dtype": dtype,
                                "shape": [e.lstrip("_") for e in exprs[arg]]}
        if arg in names.inputs:
            spec["init"] = input_init(real.inputs[names.inputs[arg]], dtype, at)
        elif arg in names.state:
            spec["init"] = state_init(state[names.state[arg]], dtype)
        if arg in (p.overrides.get("init") or {}):
            spec["init"] = dict(p.overrides["init"][arg])
        args[arg] = {k: v for k, v in spec.items() if v is not None}
    nbytes = " + ".join(f"{dtypes.get(d).itemsize}" + "".join(f" * {e}" for e in args[a]["shape"])
                        for a, (d, _) in first.items())
    out_dtype = first[next(iter(names.outputs))][0]
    name = p.path.stem if p.function is None else f"{p.path.stem}_{p.function}"
    cfg: dict[str, Any] = {
        "name": str(p.overrides.get("name", name)),
        "description": str(p.overrides.get("description", _description(p, names.constants))),
        "args": args,
        "sizes": {"correctness": [sizes(s) for s in correctness], "timing": [sizes(timing)],
                  "holdout": [sizes(s) for s in held or correctness]},
        "reference": "torch",
        "torch": {"file": str(p.path), "function": p.function, "sha256": p.sha256, "sizes": list(timing),
                  "follow": p.follow,
                  "inputs": names.inputs, "state": names.state, "outputs": list(names.outputs),
                  **({"forward": names.order, "constants": names.constants} if names.constants else {})},
        "traffic": {"bytes": nbytes, "flops": FLOPS if counted else 0,
                    "peak": PEAK.get(out_dtype, "fp32") if counted else "memory"},
        "dir": str(p.path.parent),
    }
    cfg["module"] = _module(p, timing, points, names)
    if "tolerance" in p.overrides:
        cfg["tolerance"] = dict(p.overrides["tolerance"])
    if "max_scratch_bytes" in p.overrides:
        cfg["max_scratch_bytes"] = int(p.overrides["max_scratch_bytes"])
    positive_where_needed(cfg, {a: real.inputs[k] for a, k in names.inputs.items()})
    from evolve.task.torch_calibration import judgeable  # it loads the task this builds

    cfg.update(judgeable(cfg))
    return cfg


def _module(p: Problem, timing: dict[str, int], points: list[tuple[dict[str, int], Shapes]],
            names: Names) -> dict[str, Any]:
    """How the task's arguments stand to the Model (``evolve.results.modelnew``): forward's inputs,
    the state_dict's parameters, and each constructor argument as the size it gives (it follows
    that size wherever the file is evaluated) or a value frozen into the kernel."""
    given = p.init_inputs(timing)
    elsewhere = [(s, p.init_inputs(s)) for s, _ in points[1:]]
    init: list[dict[str, Any]] = []
    for i, (name, v) in enumerate(zip(p.init_names(len(given)), given, strict=True)):
        at = [(s, vs[i]) for s, vs in elsewhere if len(vs) == len(given)]
        size = _size_given(v, timing, at) if len(at) == len(elsewhere) else None
        sizes = ([_size_given(x, timing, [(s, w[j]) for s, w in at]) for j, x in enumerate(v)]
                 if isinstance(v, tuple | list) and v and len(at) == len(elsewhere)
                 and all(isinstance(w, tuple | list) and len(w) == len(v) for _, w in at) else [None])
        if size is not None:
            init.append({"name": name, "size": size})
        elif None not in sizes:  # a tuple of sizes (normalized_shape=(features, dim1, dim2))
            init.append({"name": name, "size": sizes})
        elif _plain(v):
            init.append({"name": name, "value": list(v) if isinstance(v, tuple) else v})
        else:  # a ModelNew cannot be made with it: it takes no constructor arguments then
            init = None
            break
    arg_of = {fwd: arg for arg, fwd in names.inputs.items()}
    forward = [{"name": n, "value": names.constants[n]} if n in names.constants else arg_of[n]
               for n in names.order]
    return {**({} if init is None else {"init": init}), "forward": forward, "parameters": dict(names.state)}


def _size_given(v: Any, timing: Mapping[str, int], elsewhere: list[tuple[dict[str, int], Any]]) -> str | None:
    """The size an integer constructor argument gives: equal to it at the timing size and wherever
    else the file is evaluated."""
    return next((k for k, tv in timing.items() if type(v) is int and v == tv and elsewhere
                 and all(w == s[k] for s, w in elsewhere)), None)


def _plain(v: Any) -> bool:
    """A value the task file can hold and a constructor call can be compared with."""
    if isinstance(v, list | tuple):
        return all(_plain(x) for x in v)
    return v is None or type(v) in (bool, int, float, str)


def _size_globals(p: Problem) -> dict[str, int]:
    """The integer globals that shape an input, parameter or buffer (the others stay as they are)."""
    base = meta(p, {})
    ref = _structure(base)
    out = {}
    for k, v in p.globals.items():
        if v < 1:
            continue
        for trial in (v + 1, 2 * v):
            try:
                other = _structure(meta(p, {k: trial}))
            except (EvolveError, NotImplementedError, RuntimeError):
                continue
            if [s[:2] for s in other] == [s[:2] for s in ref] and other != ref:
                out[k] = v
                break
    if not out:
        raise NotATask("no module-level integer shapes its inputs (sizes are module-level integers that "
                       "get_inputs() and get_init_inputs() read)")
    return out


def _structure(inst: Instance) -> list[tuple[str, int, tuple[int, ...]]]:
    tensors = {**inst.inputs, **inst.state()}
    return [(k, t.dim(), tuple(t.shape)) for k, t in tensors.items()]


def _smaller(p: Problem, timing: dict[str, int], names: Names,
             points: list[tuple[dict[str, int], Shapes]]) -> list[dict[str, int]]:
    """Correctness sizes: distinct small primes, ones, and moderate awkward values (sizes of 8 or
    less kept in the first two), each within ELEMENTS; at least one, or the file cannot be judged."""
    big = [k for k, v in timing.items() if v > 8]
    primes = {k: min(timing[k], _PRIMES[i % len(_PRIMES)]) for i, k in enumerate(big)}
    moderate = {k: min(timing[k], 4 * math.isqrt(timing[k]) + 1 + 2 * i) for i, k in enumerate(big)}
    candidates = [{**timing, **primes}, {**timing, **moderate}, dict.fromkeys(timing, 1),
                  {k: max(1, v - 1) if v <= 8 else primes[k] + 2 for k, v in timing.items()}]
    out: list[dict[str, int]] = []
    for s in candidates:
        found = try_at(p, s, names)
        if found is None:  # a constraint between sizes (groups that divide channels): put some back
            s, found = _repaired(p, s, timing, names)
        while found is not None and s not in out and s != timing:
            if elements(found) <= ELEMENTS:
                out.append(s)
                points.append((s, found))
                break
            k = max(s, key=lambda n: s[n])
            s = {**s, k: max(1, s[k] // 2 + 1)}
            found = try_at(p, s, names) if s[k] > 1 else None
    if not out:
        raise NoSmallerSize("it cannot be built or run at any size smaller than the file's own (correctness "
                            "sizes are the file evaluated again with smaller module-level integers)")
    return out


def _scaled(p: Problem, timing: dict[str, int], names: Names,
            points: list[tuple[dict[str, int], Shapes]]) -> list[dict[str, int]]:
    """The sizes over 8 divided together by 2, 4, 8...: what keeps a relation the file's sizes
    satisfy (a transposed convolution's output width equal to the channels a LayerNorm normalises,
    as in KernelBench's level 2 problem 34), where no size can shrink alone. Up to two, the
    largest that fit; none is NoSmallerSize."""
    out: list[dict[str, int]] = []
    f = 2
    while len(out) < 2 and any(v // f > 1 for v in timing.values() if v > 8):
        s = {k: max(1, v // f) if v > 8 else v for k, v in timing.items()}
        if (found := try_at(p, s, names)) is not None and elements(found) <= ELEMENTS:
            out.append(s)
            points.append((s, found))
        f *= 2
    if not out:
        raise NoSmallerSize("it cannot be built or run at any size smaller than the file's own, each size "
                            "alone or all together (correctness sizes are the file evaluated again with "
                            "smaller module-level integers)")
    return out


def _repaired(p: Problem, s: dict[str, int], timing: dict[str, int],
              names: Names) -> tuple[dict[str, int], Shapes | None]:
    """The candidate with one size back at the file's value, else with one after another back."""
    changed = [k for k in s if s[k] != timing[k]]
    for k in changed:
        if (found := try_at(p, one := {**s, k: timing[k]}, names)) is not None:
            return one, found
    for k in changed:
        s = {**s, k: timing[k]}
        if (found := try_at(p, s, names)) is not None:
            return s, found
    return s, None


def _held_out(p: Problem, correctness: list[dict[str, int]], timing: dict[str, int], names: Names,
              points: list[tuple[dict[str, int], Shapes]]) -> list[dict[str, int]]:
    """At most four sizes the winner is re-verified at, each a correctness size grown by one in
    every dimension that still builds (a conv3d with 24 channels in 8 groups cannot take 25): grown
    everywhere, else one size at a time, keeping each growth the file accepts. Empty where none
    builds: the task then names its correctness sizes, never the +1 default (unbuildable here)."""
    held: list[dict[str, int]] = []
    for s in correctness:
        if len(held) == 4:
            break
        grown = {k: v + 1 for k, v in s.items()}
        found = try_at(p, grown, names)
        if found is None:
            grown, found = dict(s), None
            for k in s:
                trial = {**grown, k: grown[k] + 1}
                if (there := try_at(p, trial, names)) is not None:
                    grown, found = trial, there
        if found is not None and grown not in correctness and grown != timing and grown not in held:
            held.append(grown)
            points.append((grown, found))
    return held


def _dims(arg: str, points: list[tuple[dict[str, int], Shapes]], timing: dict[str, int]) -> list[str]:
    """Each extent of an argument, over every size the file was evaluated at: a size, a constant,
    a product of two sizes, or a derived size (its name with a leading '_')."""
    seen = [(s, shapes[arg][1]) for s, shapes in points]
    out = []
    for j in range(len(seen[0][1])):
        vals = [shape[j] for _, shape in seen]
        plain = [k for k in timing if all(s[k] == v for (s, _), v in zip(seen, vals, strict=True))]
        pairs = [f"{a} * {b}" for i, a in enumerate(timing) for b in list(timing)[i:]
                 if all(s[a] * s[b] == v for (s, _), v in zip(seen, vals, strict=True))]
        if plain:
            out.append(plain[0])
        elif len(set(vals)) == 1:
            out.append(str(vals[0]))
        elif pairs:
            out.append(pairs[0])
        else:
            out.append(f"_{arg}_d{j}")
    return out


def _description(p: Problem, constants: Mapping[str, Any]) -> str:
    what = f"the function {p.function}" if p.function else "the Model's forward"
    fixed = "".join(f"; the forward's argument {k} is always {v!r}, a constant to build into the kernel "
                    "(not a kernel argument)" for k, v in constants.items())
    return (f"Compute what {what} in this PyTorch file computes, in eval mode (its float64 run is the "
            f"reference); the Model's parameters and buffers are input arguments named after its "
            f"state_dict keys ('.' as '_'), the outputs are out (or out0, out1, ...){fixed}:\n{p.source}")
