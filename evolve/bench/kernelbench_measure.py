"""One KernelBench problem measured in one process on the GPU: the run's ``ModelNew``, PyTorch eager
and torch.compile (one per mode), each checked against the float64 ``Model`` on fresh signed-normal
inputs of several seeds (not KernelBench's U[0,1), on which zeros and other wrong kernels pass), then
timed side by side both ways: this tool's protocol (``time_side_by_side``: L2 flushed before each
call, the calls rotating over several checked input sets, median and IQR) and KernelBench's (the
whole forward, mean of 100 calls after 3 warm-ups on the same inputs). Every timed output is
checked against the reference of its inputs (how: :mod:`evolve.bench.kernelbench_check`). Run as
``python -m evolve.bench.kernelbench_measure REQUEST.json RESULT.json`` by the driver (a kernel
that kills the process fails its problem only).

The contract with the other parts lives here and only here: the problem file defines ``Model``,
``get_inputs`` and ``get_init_inputs``; the run's directory holds ``best.py`` whose ``ModelNew``
takes the Model's constructor arguments and loads a Model's ``state_dict``.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from evolve.bench.kernelbench_check import (
    Floor,
    Forward,
    Reference,
    TimedCheck,
    _line,
    check,
    check_all,
    noise_floors,
    tensors,
)
from evolve.errors import EvolveError

MODEL_NEW = "ModelNew"
EAGER = "eager"
INIT_SEED = 0  # the Model's parameters, as it initialises them


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
                     trials: int, floors: Sequence[Floor] | None = None) -> dict[str, Any]:
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
        if (reason := check(out, want, floors)) is not None:
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
        floors = noise_floors(model, sets, refs)  # where the float64 output is rounding noise
        wrong, raised = check_all(impls, sets, refs, floors)
        failed |= wrong
        # nothing is timed beside a wrong ModelNew; a baseline is timed (it is what a user has)
        # whatever its error against float64, unless it raised
        timed = {} if MODEL_NEW in failed else {n: f for n, f in impls.items() if n not in raised}
        rotating = {n: Rotation(f, sets[: int(req["input_sets"])], TimedCheck(refs, floors))
                    for n, f in timed.items()}
        stats = time_side_by_side(rotating, int(cp.cuda.Device().attributes["L2CacheSize"]),
                                  TimerSettings(**req["timer"]),
                                  after={n: r.after for n, r in rotating.items()}) if timed else {}
        kb = req["kb_timing"]
        theirs = {n: kernelbench_time(f, sets[0], refs[0], int(kb["warmup"]), int(kb["trials"]), floors)
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
    return {"impls": rows, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            **({"noise_floor": [dataclasses.asdict(f) for f in floors]} if floors else {})}


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
