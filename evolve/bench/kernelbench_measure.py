"""One KernelBench problem measured in one process on the GPU: the run's ``ModelNew``, PyTorch eager
and torch.compile (one per mode), each checked against the float64 ``Model`` on fresh signed-normal
inputs of several seeds (not KernelBench's U[0,1), on which zeros and other wrong kernels pass), then
timed side by side both ways: this tool's protocol (``time_side_by_side``: L2 flushed before each
call, the calls rotating over several checked input sets, median and IQR) and KernelBench's (the
whole forward, mean of 100 calls after 3 warm-ups on the same inputs). Every timed output is
checked against the reference of its inputs. Run as ``python -m evolve.bench.kernelbench_measure
REQUEST.json RESULT.json`` by the driver (a kernel that kills the process fails its problem only).

The contract with the other parts lives here and only here: the problem file defines ``Model``,
``get_inputs`` and ``get_init_inputs``; the run's directory holds ``best.py`` whose ``ModelNew``
takes the Model's constructor arguments and loads a Model's ``state_dict``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.task.correctness import compare
from evolve.task.task import Tolerance

MODEL_NEW = "ModelNew"
EAGER = "eager"
INIT_SEED = 0  # the Model's parameters, as it initialises them
Forward = Callable[..., Any]


def compiled_name(mode: str) -> str:
    return f"torch.compile ({mode})"


def load_module(path: Path, name: str) -> ModuleType:
    """A Python file as a module (the user's problem file, or the run's own best.py)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EvolveError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_problem(path: Path) -> ModuleType:
    module = load_module(path, f"kernelbench_problem_{abs(hash(str(path)))}")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise EvolveError(f"{path.name} is not a KernelBench problem file: no {', '.join(missing)}")
    return module


def load_model_new(run_dir: Path) -> type:
    best = run_dir / "best.py"
    if not best.is_file():
        raise EvolveError(f"{run_dir} has no best.py")
    cls = getattr(load_module(best, f"kernelbench_best_{abs(hash(str(run_dir)))}"), MODEL_NEW, None)
    if not isinstance(cls, type):
        raise EvolveError(f"{best} defines no class {MODEL_NEW}")
    return cls


def draw_inputs(problem: ModuleType, seed: int, device: str, positive: frozenset[int] = frozenset()
                ) -> list[Any]:
    """``get_inputs()`` under ``seed`` (integer tensors, such as class targets, are kept as it draws
    them), every floating-point tensor replaced by a signed standard normal of its shape and dtype,
    or, for the inputs in ``positive``, a uniform draw over the range of the file's own tensor."""
    import torch

    torch.manual_seed(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for i, x in enumerate(problem.get_inputs()):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and i in positive:
            x = torch.empty(x.shape, device=device, dtype=x.dtype).uniform_(
                float(x.min()), float(x.max()), generator=gen)
        elif isinstance(x, torch.Tensor):
            x = (torch.randn(x.shape, generator=gen, device=device, dtype=x.dtype) if x.is_floating_point()
                 else x.to(device))
        out.append(x)
    return out


def positive_inputs(problem: ModuleType) -> frozenset[int]:
    """The floating-point inputs positive in the file's own draw: where signed normal inputs make
    the Model NaN (a log, a square root, probabilities), these are drawn over that range instead,
    as a task made from the file draws them (:mod:`evolve.task.torch_draws`)."""
    import torch

    torch.manual_seed(0)
    return frozenset(i for i, x in enumerate(problem.get_inputs()) if isinstance(x, torch.Tensor)
                     and x.is_floating_point() and x.numel() and float(x.min()) > 0)


def checked_inputs(problem: ModuleType, model: Any, seeds: int, device: str
                   ) -> tuple[list[list[Any]], list[list[tuple[Any, Any]]]]:
    """The input sets every implementation is checked on, and the float64 Model's outputs on them
    (with their dtypes): signed normal, or positive where that makes the reference NaN."""
    sets = [draw_inputs(problem, 1000 + k, device) for k in range(seeds)]
    reference = Reference(model, [o.dtype for o in tensors(model(*sets[0]))])
    refs = [reference(xs) for xs in sets]
    if not _finite(refs) and (positive := positive_inputs(problem)):
        sets = [draw_inputs(problem, 1000 + k, device, positive) for k in range(seeds)]
        refs = [reference(xs) for xs in sets]
    return sets, refs


def _finite(refs: Sequence[Sequence[tuple[Any, Any]]]) -> bool:
    import torch

    return all(bool(torch.isfinite(r).all()) for ref in refs for r, _ in ref)


def in_float64(xs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]


def tensors(out: Any) -> list[Any]:
    """A forward's result as a list of tensors (one, or a tuple's)."""
    import torch

    xs = list(out) if isinstance(out, tuple | list) else [out]
    if not all(isinstance(x, torch.Tensor) for x in xs):
        raise EvolveError(f"the forward returned {type(out).__name__}, not tensors")
    return xs


def tolerance(dtype: Any) -> Tolerance | None:
    """The default tolerance of a torch dtype (None: compared exactly)."""
    tol = dtypes.get(str(dtype).removeprefix("torch.")).tolerance
    return None if tol is None else Tolerance(tol.atol, tol.rtol, tol.l2)


def check(got: Any, want: Sequence[Any]) -> str | None:
    """Why a forward's result is not the float64 reference's (None: it is), each output within the
    tolerance of the dtype the Model returns; ``want`` holds the reference's outputs, each with the
    dtype it must have (see ``Reference``)."""
    try:
        outs = tensors(got)
    except EvolveError as exc:
        return str(exc)
    if len(outs) != len(want):
        return f"{len(outs)} outputs, the Model returns {len(want)}"
    for i, (o, (r, dtype)) in enumerate(zip(outs, want, strict=True)):
        name = f"output {i}"
        if o.dtype != dtype:
            return f"{name}: dtype {o.dtype} != the Model's {dtype}"
        if not o.is_floating_point():
            o, r = o.long(), r.long()
        xp, (oa, ra) = _arrays(o.detach().double() if o.is_floating_point() else o, r)
        reason = compare(xp, name, oa, ra, tolerance(dtype), fill=None)
        if reason is not None:
            return reason
    return None


def _arrays(*ts: Any) -> tuple[Any, list[Any]]:
    """Tensors as arrays of the module that judges them (NumPy on the CPU, CuPy on the GPU)."""
    if ts[0].is_cuda:
        import cupy as cp

        return cp, [cp.from_dlpack(t.contiguous()) for t in ts]
    return np, [t.cpu().numpy() for t in ts]


class Reference:
    """The Model in float64 (``Model.eval()``, ``no_grad()``), and its outputs for each input set, each
    with the dtype the float32 Model returns."""

    def __init__(self, model: Any, dtypes_out: list[Any]) -> None:
        self.model = copy.deepcopy(model).to(dtype=__import__("torch").float64)
        self.dtypes = dtypes_out

    def __call__(self, xs: Sequence[Any]) -> list[tuple[Any, Any]]:
        return [(r, d) for r, d in zip(tensors(self.model(*in_float64(xs))), self.dtypes, strict=True)]


def implementations(problem: ModuleType, model_new: type | None, compile_modes: Sequence[str],
                    device: str) -> tuple[Any, dict[str, Forward], dict[str, str]]:
    """The Model (float32, as the file defines it) and each implementation to judge; those that
    could not be built, with the reason."""
    import torch

    init = list(problem.get_init_inputs())
    torch.manual_seed(INIT_SEED)
    model = problem.Model(*init).to(device).eval()
    impls: dict[str, Forward] = {}
    failed: dict[str, str] = {}
    if model_new is not None:
        try:
            new = model_new(*init)
            new.load_state_dict(model.state_dict())
            impls[MODEL_NEW] = new.to(device).eval()
        except Exception as exc:
            failed[MODEL_NEW] = f"ModelNew could not be built: {_line(exc)}"
    impls[EAGER] = model
    for mode in compile_modes:  # each on its own copy: one mode's compiled code is not another's
        impls[compiled_name(mode)] = torch.compile(copy.deepcopy(model), mode=mode, dynamic=False)
    return model, impls, failed


def check_all(impls: dict[str, Forward], sets: list[list[Any]],
              refs: list[list[tuple[Any, Any]]]) -> tuple[dict[str, str], set[str]]:
    """Each implementation on every input set: the first reason each one fails, and those that
    raised (which cannot be timed)."""
    failed, raised = {}, set()
    for name, fn in impls.items():
        for k, (xs, want) in enumerate(zip(sets, refs, strict=True)):
            try:
                reason = check(fn(*xs), want)
            except Exception as exc:
                reason = f"failed: {_line(exc)}"
                raised.add(name)
            if reason is not None:
                failed[name] = f"seed {k}: {reason}"
                break
    return failed, raised


class TimedCheck:
    """Every timed call's outputs against the reference of its inputs, judged on the device with no
    host sync (so that checking costs the timed window nothing) and read once at the end: the same
    rule as ``check`` (each element within atol*max|ref| + rtol*|ref|, relative L2 bounded)."""

    def __init__(self, refs: list[list[tuple[Any, Any]]]) -> None:
        import torch

        self.refs = refs
        self.bad = torch.zeros((), dtype=torch.int64, device=refs[0][0][0].device)
        self.calls = 0

    def __call__(self, got: Any, k: int) -> None:
        import torch

        self.calls += 1
        outs = tensors(got)
        ok = torch.ones((), dtype=torch.bool, device=self.bad.device)
        if len(outs) != len(self.refs[k]):
            ok = torch.zeros_like(ok)
        for o, (r, dtype) in zip(outs, self.refs[k], strict=False):
            if o.shape != r.shape or o.dtype != dtype:
                ok = torch.zeros_like(ok)
                continue
            tol = tolerance(dtype)
            if tol is None:
                ok = ok & (o == r.to(o.dtype)).all()
                continue
            err = o.double() - r
            bound = tol.atol * r.abs().max() + tol.rtol * r.abs()
            norm = torch.linalg.vector_norm(r)
            rel = torch.linalg.vector_norm(err) / torch.where(norm > 0, norm, torch.ones_like(norm))
            ok = ok & (err.abs() <= bound).all() & (rel <= tol.l2)
        self.bad += (~ok).long()

    def failures(self) -> int:
        return int(self.bad)


class Rotation:
    """A forward called on input set after input set (each call's inputs differ from the last's);
    ``after`` checks the output of the call just made."""

    def __init__(self, fn: Forward, sets: list[list[Any]], checker: TimedCheck) -> None:
        self.fn, self.sets, self.checker = fn, sets, checker
        self.k, self.last = 0, None

    def __call__(self) -> None:
        self.k = (self.k + 1) % len(self.sets)
        self.last = self.fn(*self.sets[self.k])

    def after(self) -> None:
        self.checker(self.last, self.k)
        self.last = None


def kernelbench_time(fn: Forward, xs: list[Any], want: list[tuple[Any, Any]], warmup: int,
                     trials: int) -> dict[str, Any]:
    """KernelBench's timing: ``warmup`` calls, then ``trials`` calls of the whole forward on the
    same inputs, each between CUDA events and followed by a device sync; the mean. Each timed
    output is checked here too (after the sync, outside the events)."""
    import torch

    for _ in range(warmup):
        fn(*xs)
    torch.cuda.synchronize()
    times, bad, first = [], 0, None
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn(*xs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        if (reason := check(out, want)) is not None:
            bad, first = bad + 1, first or reason
    return {"mean_ms": float(np.mean(times)), "std_ms": float(np.std(times)), "n": len(times),
            "bad_calls": bad, "first_bad": first}


def measure(problem_file: Path, run_dir: Path, req: dict[str, Any]) -> dict[str, Any]:
    """The problem's implementations checked and timed both ways (see the module's docstring)."""
    import cupy as cp
    import torch

    from evolve.bench.peers import full_precision
    from evolve.bench.timer import TimerSettings, time_side_by_side

    full_precision(torch)
    device = "cuda"
    problem = load_problem(problem_file)
    try:
        model_new: type | None = load_model_new(run_dir)
        load_error = None
    except Exception as exc:
        model_new, load_error = None, _line(exc)
    with torch.no_grad():
        model, impls, failed = implementations(problem, model_new, req["compile_modes"], device)
        if load_error:
            failed[MODEL_NEW] = load_error
        sets, refs = checked_inputs(problem, model, int(req["seeds"]), device)
        wrong, raised = check_all(impls, sets, refs)
        failed |= wrong
        # nothing is timed beside a wrong ModelNew; a baseline is timed (it is what a user has)
        # whatever its error against float64, unless it raised
        timed = {} if MODEL_NEW in failed else {n: f for n, f in impls.items() if n not in raised}
        rotating = {n: Rotation(f, sets[: int(req["input_sets"])], TimedCheck(refs))
                    for n, f in timed.items()}
        stats = time_side_by_side(rotating, int(cp.cuda.Device().attributes["L2CacheSize"]),
                                  TimerSettings(**req["timer"]),
                                  after={n: r.after for n, r in rotating.items()}) if timed else {}
        kb = req["kb_timing"]
        theirs = {n: kernelbench_time(f, sets[0], refs[0], int(kb["warmup"]), int(kb["trials"]))
                  for n, f in timed.items()}
    rows: dict[str, Any] = {}
    for name in impls:
        row: dict[str, Any] = {"correct": name not in failed, "reason": failed.get(name)}
        if name in stats:
            st = stats[name]
            row["ours"] = {"median_ms": st.median_s * 1e3, "iqr_ms": st.iqr_s * 1e3, "n": st.n,
                           "bad_calls": rotating[name].checker.failures(),
                           "checked_calls": rotating[name].checker.calls}
            row["kernelbench"] = theirs[name]
        rows[name] = row
    if MODEL_NEW not in rows:
        rows[MODEL_NEW] = {"correct": False, "reason": failed.get(MODEL_NEW, "no ModelNew")}
    return {"impls": rows, "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def _line(exc: BaseException) -> str:
    """An error as one clipped line (PyTorch says which keys did not load on its second line)."""
    from evolve.bench.kernelbench import clip

    return clip(str(exc).strip() or type(exc).__name__)


def main(argv: list[str]) -> int:
    request, result = (Path(a) for a in argv)
    req = json.loads(request.read_text())
    try:
        out = measure(Path(req["problem"]), Path(req["run_dir"]), req)
    except Exception as exc:  # nothing could be measured (no CUDA, a problem file that fails to load):
        from evolve.bench.kernelbench import clip  # its reason, and the problem is tried again next time

        out = {"error": clip(f"{type(exc).__name__}: {str(exc).strip()}"), "retry": True}
    result.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
