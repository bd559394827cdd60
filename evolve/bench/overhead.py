"""Call overhead: what a user pays per call of the result from PyTorch (best.py's function,
``ModelNew``, the registered custom op) beside the torch op it replaces, at a small size (where
the host's cost is the call's) and a large one. ModelNew, a module, is set beside the torch op
called as a module's forward ("torch module"), and "one launch" is a bare driver launch of the
kernel's first launch (through ctypes): a plan of several kernels pays one such launch per kernel.
Where best.py's native launcher is built (:mod:`evolve.results.native`), "best.py, ctypes" is the
same call through the ctypes path it falls back to.

The kernel is the task's first seed at its defaults, written out as an export writes a run
(best.cu, best.json, best.py): what a call costs on the host does not depend on the tuning.
Per implementation: the host time per call of back-to-back calls that nothing waits for, in
batches of ``BATCH`` with the GPU drained between them (untimed), so that the launch queue never
fills and a kernel slower than its launch cannot pass its GPU time off as host time; and the wall
time per call with the GPU's work included; each the best of several repeats."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from evolve import dtypes
from evolve.bench.peers import _TORCH, tensors
from evolve.results.bestpy import best_py, function_name
from evolve.results.fastcall import TorchPath, launch_ex
from evolve.results.native import NativePath
from evolve.task.task import Task, builtin_task, size_label

log = logging.getLogger(__name__)
REPEATS = 5
BATCH = 100  # calls between drains: far below the launch queue's depth (about a thousand launches)


def call_overhead(tasks: Sequence[str], sizes: Mapping[str, Sequence[Mapping[str, int]]], out: Path,
                  calls: int) -> dict[str, Any]:
    """The table's rows and its markdown, per task and size."""
    import cupy as cp
    import torch

    rows = []
    for name in tasks:
        task = builtin_task(name)
        best = _best_module(task, out / "overhead" / name)
        op = best.register_torch_op("evolve_bench")
        model = best.ModelNew().cuda()
        fn = getattr(best, function_name(task))
        ctypes_path = TorchPath(task, best.kernel._prepare)
        ref = _TORCH[name]
        for s in sizes[name]:
            arrays = {**task.make_inputs(cp, s, 0),
                      **{a.name: cp.empty(task.shape(a, s), dtype=dtypes.storage(a.dtype))
                         for a in task.fresh_outputs}}
            t = tensors(task, arrays)
            ins = [t[a.name] for a in task.inputs]
            named = [t[n] for n in ref.__code__.co_varnames[1:ref.__code__.co_argcount]]
            given = [s[k] for k in best.kernel.size_parameters(task)]
            in_module = _in_module(torch, ref)
            impls: dict[str, Callable[[], Any]] = {
                "torch": lambda ref=ref, named=named: ref(torch, *named),
                "torch module": lambda m=in_module, named=named: m(*named),
                "best.py": lambda fn=fn, ins=ins: fn(*ins),
                "ModelNew": lambda model=model, ins=ins: model(*ins),
                "custom op": lambda op=op, ins=ins, given=given: op(*ins, *given),
            }
            fn(*ins)  # the shape's launches made, to time one of them bare beside the rest
            given_args = [None if a.role == "output" else t[a.name] for a in task.args]
            refuse = best.kernel._refuse
            if isinstance(best.kernel.torch_path(), NativePath):  # the ctypes path beside the native one
                impls["best.py, ctypes"] = lambda c=ctypes_path, v=given_args, r=refuse: c([*v], {}, r)
            ctypes_path([*given_args], {}, refuse)
            first = ctypes_path.newest().launches[0].args
            impls["one launch"] = lambda first=first: launch_ex()(*first)
            figures = per_call(impls, calls)
            prepared = ctypes_path.newest()
            launcher = "native" if isinstance(best.kernel.torch_path(), NativePath) else "ctypes"
            launches = len(prepared.launches) + len(prepared.zero)
            for impl, (host, wall) in figures.items():
                rows.append({"task": name, "size": size_label(s), "implementation": impl, "host_us": host,
                             "wall_us": wall, "over_torch_us": host - figures["torch"][0],
                             "vs_torch": host / figures["torch"][0],
                             "launches": 1 if impl in ("torch", "torch module", "one launch") else launches,
                             "launcher": launcher})
            log.info("call overhead %s at %s: %s", name, size_label(s), ", ".join(
                f"{impl} {host:.1f} µs" for impl, (host, _) in figures.items()))
    return {"rows": rows, "table": table(rows)}


def _in_module(torch: Any, ref: Callable[..., Any]) -> Any:
    """The torch op as the forward of a module: what ModelNew, a module, is compared with."""

    class InModule(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return ref(torch, *args)

    return InModule()


def per_call(impls: Mapping[str, Callable[[], Any]], calls: int, sync: Callable[[], Any] | None = None
             ) -> dict[str, tuple[float, float]]:
    """(host µs, wall µs) per call of each implementation, each the best of ``REPEATS`` runs of
    ``calls`` calls, the implementations' runs interleaved (a slow phase of the host falls on all
    of them alike); ``sync`` waits for the GPU (``torch.cuda.synchronize`` unless given)."""
    if sync is None:
        import torch

        sync = torch.cuda.synchronize
    for fn in impls.values():
        for _ in range(min(calls, 50)):  # warm-up: compile, load, plan, allocator
            fn()
    sync()
    best = {name: (float("inf"), float("inf")) for name in impls}
    for _ in range(REPEATS):
        for name, fn in impls.items():
            spent, done = 0.0, 0
            sync()
            start = time.perf_counter()
            while done < calls:
                n = min(BATCH, calls - done)
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                spent += time.perf_counter() - t0
                sync()
                done += n
            total = time.perf_counter() - start
            host, wall = best[name]
            best[name] = (min(host, spent / calls * 1e6), min(wall, total / calls * 1e6))
    return best


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| task | size | implementation | launcher | driver calls | host µs/call | wall µs/call "
             "| host µs over torch | host vs torch |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['task']} | {r['size']} | {r['implementation']} | {_launcher(r)} "
              f"| {r.get('launches', '')} "
              f"| {r['host_us']:.1f} | {r['wall_us']:.1f} | {r['over_torch_us']:+.1f} "
              f"| {r['vs_torch']:.2f}x |" for r in rows]
    return "\n".join(lines)


def _launcher(row: Mapping[str, Any]) -> str:
    """Which launcher made a row's calls: none for the torch ops, ctypes for the ctypes rows."""
    impl = row["implementation"]
    if impl in ("torch", "torch module"):
        return ""
    return "ctypes" if impl in ("best.py, ctypes", "one launch") else str(row.get("launcher", ""))


def _best_module(task: Task, folder: Path) -> ModuleType:
    """best.cu, best.json and best.py for the task's first seed, imported."""
    v = task.seeds()[0]
    cfg = dict(v.spec.default)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "best.cu").write_text(v.with_defines(cfg, task.defines))
    (folder / "best.json").write_text(json.dumps({"task_config": dict(task.config), "tunables": cfg}))
    (folder / "best.py").write_text(best_py(task, "bench", "this GPU"))
    name = f"evolve_bench_best_{function_name(task)}"
    spec = importlib.util.spec_from_file_location(name, folder / "best.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
