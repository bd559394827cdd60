"""best.py's native launcher: a call on PyTorch tensors with no Python between it and the driver.

The ctypes path (:mod:`evolve.results.fastcall`) costs a Python launch per kernel, and the custom
op two more hops through Python (its CUDA kernel and its autograd formula), about 10 µs each on the
H200's host. ``launcher.cpp``, built once per PyTorch with ``torch.utils.cpp_extension`` (a C++
compiler, ninja and the CUDA headers: what building any PyTorch extension needs), keeps the
shapes, allocates the outputs and launches in C++, and is the op's CUDA kernel and, for a
functional op, its autograd kernel (straight to the launch unless autograd records; then the
forward-only formula in Python). A shape not seen before is still prepared here, in Python, by the
same checks and plan as the ctypes path. Where the launcher cannot be built (no compiler, a
CPU-only PyTorch) or ``EVOLVE_LAUNCHER=python`` is set, best.py takes the ctypes path: the same
results, a few µs more per call; the reason is logged once.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evolve.evaluate.plan import LaunchPlan
from evolve.kernel.compiler import CACHE_DIR
from evolve.results.fastcall import MAX_CACHED, check, prepare_shape
from evolve.task.task import Task

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("launcher.cpp")
ENV = "EVOLVE_LAUNCHER"  # python: the ctypes path only; anything else: this one where it builds
INT32, SLOT, FIXED = range(3)  # a kernel parameter: a value, a task argument's address, a scratch's


@functools.cache
def extension() -> Any | None:
    """The built extension (compiled on first use, then loaded from the cache), or None, with the
    reason logged once, where it cannot be had."""
    if os.environ.get(ENV, "").strip().lower() == "python":
        return None
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        return None
    if not torch.cuda.is_available() or torch.version.cuda is None:
        return None
    source = SOURCE.read_text()
    digest = hashlib.sha256(f"{source}\0{torch.__version__}".encode()).hexdigest()[:12]
    name = f"cuda_evolve_launcher_{digest}"
    folder = CACHE_DIR.parent / "launcher" / name
    folder.mkdir(parents=True, exist_ok=True)
    built = any(folder.glob(f"{name}*.so"))
    if not built:
        log.info("building best.py's native launcher for PyTorch %s (once, about a minute): %s",
                 torch.__version__, folder)
    start = time.monotonic()
    try:
        module = cpp_extension.load(name=name, sources=[str(SOURCE)], build_directory=str(folder),
                                    extra_cflags=["-O2"], with_cuda=True, verbose=False)
    except Exception as exc:  # a build fails in many ways (compiler, ninja, headers): each falls back
        reason = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        log.warning("best.py's native launcher could not be built (%s): calls take the ctypes path, a "
                    "few µs more each (pip install ninja, a C++ compiler and the CUDA toolkit's headers "
                    "give it; %s=python silences this)", reason[:300], ENV)
        return None
    if not built:
        log.info("native launcher built in %.0f s", time.monotonic() - start)
    return module


class NativePath:
    """The per-shape cache and the launch in C++; the same contract as ``fastcall.TorchPath``."""

    def __init__(self, ext: Any, task: Task, plan: Callable[[int, dict[str, int]], tuple[Any, LaunchPlan]],
                 refuse: Callable[[list[Any]], None]):
        import torch

        self.task = task
        self.extension = ext
        self._plan = plan
        self._refuse = refuse
        self._dtypes = [getattr(torch, a.dtype) for a in task.args]
        self._size_names = tuple(task.correctness_sizes[0])
        self._unsized = (-1,) * len(self._size_names)
        first = next(i for i, a in enumerate(task.args) if a.role != "output")
        self.launcher = ext.Launcher(len(task.args), first, self._describe, MAX_CACHED)
        self._run = self.launcher.run

    def __call__(self, values: list[Any], sizes: Mapping[str, int],
                 refuse: Callable[[list[Any]], None] | None = None) -> list[Any]:
        """Launch on the task's arguments in its order (None: an output to allocate)."""
        if not sizes:
            return self._run(values, self._unsized)
        return self._run(values, self.size_values(sizes))

    def size_values(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The launcher's sizes: one per size name, -1 where not given."""
        if unknown := set(sizes) - set(self._size_names):
            raise ValueError(f"{self.task.name}: unknown size(s) {sorted(unknown)}; the sizes are "
                             f"{', '.join(self._size_names)}")
        return tuple(int(sizes.get(n, -1)) for n in self._size_names)

    @property
    def cached(self) -> int:
        """How many shapes (and streams) are prepared."""
        return int(self.launcher.cached)

    def _describe(self, values: list[Any], sizes: list[int], device: int, stream: int) -> tuple[Any, ...]:
        """A shape for the launcher (``launcher.cpp``'s ``prepare`` reads it): (context, zeroed
        scratch, outputs as (index, shape, prototype), scratch tensors, launches as (function, grid,
        block, shared bytes, cluster or None, parameters, label)); or the one-line error."""
        import torch

        first = next(v for v, a in zip(values, self.task.args, strict=True) if a.role != "output")
        if device < 0:
            self._refuse(values)
            raise ValueError(f"{self.task.name}: a tensor on {getattr(first, 'device', None)} cannot be "
                             "launched on")
        check(self.task, self._dtypes, device, values, self._refuse)
        given = {n: v for n, v in zip(self._size_names, sizes, strict=True) if v >= 0}
        shape = prepare_shape(self.task, self._plan, device, values, given)
        slots = {a.name: i for i, a in enumerate(self.task.args)}
        launches = []
        for function, call in zip(shape.functions, shape.geometry.plan.calls, strict=True):
            params = []
            for kind, value in call.args:
                if kind == "int32":
                    params.append((INT32, int(value)))
                elif kind == "buffer" and str(value) in slots:
                    params.append((SLOT, slots[str(value)]))
                elif kind == "buffer":
                    params.append((FIXED, shape.fixed[str(value)]))
                else:
                    raise ValueError(f"{call.kernel}: a {kind} argument is not launched by pointer")
            launches.append((function, list(call.grid), list(call.block), int(call.shared),
                             None if call.cluster is None else list(call.cluster), params,
                             f"{call.kernel} grid={call.grid} block={call.block}"))
        at = torch.device("cuda", device)
        outputs = [(i, list(s), torch.empty(0, dtype=self._dtypes[i], device=at))
                   for i, s, _ in shape.geometry.outputs]
        return shape.context, shape.zero, outputs, shape.scratch, launches


def torch_path(task: Task, plan: Callable[[int, dict[str, int]], tuple[Any, LaunchPlan]],
               refuse: Callable[[list[Any]], None]) -> Any:
    """The native path where the launcher builds, else the ctypes one."""
    ext = extension()
    if ext is not None:
        return NativePath(ext, task, plan, refuse)
    from evolve.results.fastcall import TorchPath

    return TorchPath(task, plan)
