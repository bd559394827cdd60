"""Using a run's result from a program: ``best.py`` beside ``best.cu`` launches the winner on CuPy
arrays or PyTorch CUDA tensors.

The launch is the evaluator's: the task's arguments in its order, the sizes read from their shapes,
and the grid, block, shared memory, scratch and int arguments computed from those sizes by the same
plan (:func:`evolve.evaluate.plan.make_plan`), loaded and launched by the same code (``Loaded``). Shapes,
dtypes, devices and contiguity are checked first; best.cu (which compiles on its own) is compiled
once with NVRTC for the GPU at hand and cached on disk, and loaded once per GPU. PyTorch tensors
reach CuPy through DLPack, without a copy, and the kernels run on PyTorch's current stream.
``Kernel.torch_op`` registers a ``torch.library`` custom op (with a fake implementation, so that
``torch.compile`` can trace it).
"""

from __future__ import annotations

import json
import keyword
import re
import textwrap
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.evaluate.plan import Plan, make_plan
from evolve.hardware import Hardware
from evolve.kernel.spec import Variant
from evolve.task.task import Arg, Task, load_task, size_label


def bind(task: Task, shapes: Mapping[str, Sequence[int]], sizes: Mapping[str, int] | None = None
         ) -> dict[str, int]:
    """The problem sizes that give the arguments these shapes (a size that no dimension names
    plainly must be given); ValueError says which argument does not fit."""
    names = list(task.correctness_sizes[0])
    found: dict[str, int] = {k: int(v) for k, v in (sizes or {}).items()}
    if unknown := set(found) - set(names):
        raise ValueError(f"{task.name}: unknown size(s) {sorted(unknown)}; the sizes are {', '.join(names)}")
    for arg in task.args:
        shape = shapes.get(arg.name)
        if shape is None:
            continue
        if len(shape) != len(arg.shape):
            raise ValueError(f"{task.name}: {arg.name} must have {len(arg.shape)} dimensions "
                             f"[{', '.join(e.text for e in arg.shape)}], got shape {tuple(shape)}")
        for e, dim in zip(arg.shape, shape, strict=True):
            if e.text in names and found.setdefault(e.text, int(dim)) != int(dim):
                raise ValueError(f"{task.name}: {arg.name} has {e.text} = {dim} but another argument "
                                 f"(or the call) says {e.text} = {found[e.text]}")
    if missing := [n for n in names if n not in found]:
        raise ValueError(f"{task.name}: give {', '.join(f'{n}=...' for n in missing)} (no argument's "
                         "shape says it)")
    for arg in task.args:
        shape = shapes.get(arg.name)
        if shape is not None and tuple(int(d) for d in shape) != (want := task.shape(arg, found)):
            raise ValueError(f"{task.name}: {arg.name} must have shape {want} at {size_label(found)}, "
                             f"got {tuple(shape)}")
    return found


def dtype_name(array: Any) -> str:
    """The dtype of a CuPy array or a PyTorch tensor, by evolve's (and PyTorch's) names."""
    return str(array.dtype).removeprefix("torch.")


def _accepts(arg: Arg, array: Any) -> bool:
    """bfloat16 and fp8 from CuPy come as raw bits (uint16, uint8), as CuPy holds them."""
    got = dtype_name(array)
    return got == arg.dtype or (dtypes.get(arg.dtype).bits and not _is_torch(array)
                                and got == dtypes.get(arg.dtype).storage)


def _is_torch(array: Any) -> bool:
    return type(array).__module__.startswith("torch")


class Kernel:
    """A winning kernel, ready to call; see the module's docstring."""

    def __init__(self, cu: Path | str, task_config: Mapping[str, Any], tunables: Mapping[str, int]):
        self.path = Path(cu)
        self.source = self.path.read_text()
        self.task = load_task(task_config, resolve=False)
        self.variant = Variant.parse(self.source)
        self.tunables = dict(tunables)
        self._lock = threading.Lock()
        self._loaded: dict[int, tuple[Any, Hardware]] = {}  # by device: the module and the device
        self._plans: dict[tuple[int, tuple[tuple[str, int], ...]], Plan] = {}
        self._torch_libs: list[Any] = []  # registrations live as long as their Library objects
        self._ops: dict[tuple[str, str], Any] = {}

    @classmethod
    def load(cls, cu: Path | str) -> Kernel:
        """From a run directory's best.cu and the best.json beside it."""
        info = json.loads(Path(cu).with_name("best.json").read_text())
        return cls(cu, info["task_config"], info["tunables"])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Launch on the task's arguments (positionally in its order, or by name; outputs may be
        left out and are then allocated) and any sizes no shape says; returns the outputs and
        inouts (one array, or a tuple in the task's order)."""
        import cupy as cp

        arrays, sizes = self._arguments(args, kwargs)
        first = next(iter(arrays.values()))
        device = _device(first)
        bound = bind(self.task, {k: tuple(v.shape) for k, v in arrays.items()}, sizes)
        with cp.cuda.Device(device), _stream(first):
            for arg in self.task.fresh_outputs:
                if arg.name not in arrays:
                    arrays[arg.name] = _empty_like(first, self.task.shape(arg, bound), arg.dtype)
            self._check(arrays, device)
            loaded, plan = self._prepare(device, bound)
            views = {k: _as_cupy(v, self.task, k) for k, v in arrays.items()}
            _run(loaded, plan, {**views, **_scratch(plan)})
        results = tuple(arrays[a.name] for a in self.task.outputs)
        return results[0] if len(results) == 1 else results

    # ---- pieces --------------------------------------------------------------------------
    def _arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]
                   ) -> tuple[dict[str, Any], dict[str, int]]:
        names = [a.name for a in self.task.args]
        if len(args) > len(names):
            raise TypeError(f"{self.task.name}() takes at most {len(names)} arrays ({', '.join(names)})")
        arrays: dict[str, Any] = dict(zip(names, args, strict=False))
        sizes: dict[str, int] = {}
        for k, v in kwargs.items():
            if k in names:
                if k in arrays:
                    raise TypeError(f"{self.task.name}() got {k} twice")
                arrays[k] = v
            elif v is not None:
                sizes[k] = int(v)
        arrays = {k: v for k, v in arrays.items() if v is not None}
        if missing := [a.name for a in self.task.inputs if a.name not in arrays]:
            raise TypeError(f"{self.task.name}() needs {', '.join(missing)}")
        for k, v in arrays.items():
            if not hasattr(v, "shape") or not hasattr(v, "dtype"):
                raise TypeError(f"{self.task.name}: {k} must be a CuPy array or a CUDA tensor, got "
                                f"{type(v).__name__}")
        return arrays, sizes

    def _check(self, arrays: Mapping[str, Any], device: int) -> None:
        for arg in self.task.args:
            a = arrays[arg.name]
            if not _accepts(arg, a):
                raise TypeError(f"{self.task.name}: {arg.name} must be {arg.dtype}, got {dtype_name(a)}")
            if _device(a) != device:
                raise ValueError(f"{self.task.name}: {arg.name} is on another device than "
                                 f"{self.task.args[0].name} (all arrays on one GPU)")
            if not _contiguous(a):
                raise ValueError(f"{self.task.name}: {arg.name} must be contiguous (row-major); "
                                 "use .contiguous() or cupy.ascontiguousarray")

    def _prepare(self, device: int, sizes: Mapping[str, int]) -> tuple[Any, Plan]:
        """The module on this device (compiled once, loaded once) and the plan for these sizes."""
        from evolve.evaluate.gpu.failure import Fail

        with self._lock:
            if device not in self._loaded:
                self._loaded[device] = self._load(device)
            loaded, hw = self._loaded[device]
            key = (device, tuple(sorted(sizes.items())))
            plan = self._plans.get(key)
            if plan is None:
                try:
                    plan = make_plan(self.variant.spec, self.task, sizes, self.tunables, hw)
                    loaded.add(plan)
                except (EvolveError, Fail) as exc:
                    raise ValueError(f"{self.task.name} cannot launch at {size_label(sizes)}: "
                                     f"{getattr(exc, 'reason', exc)}") from None
                self._plans[key] = plan
        return loaded, plan

    def _load(self, device: int) -> tuple[Any, Hardware]:
        from evolve.evaluate.gpu.device import device_properties
        from evolve.evaluate.gpu.failure import Fail
        from evolve.evaluate.gpu.loading import Loaded
        from evolve.hardware import from_device
        from evolve.kernel.compiler import CompileError, compile_cuda, target_arch

        hw = from_device(device_properties(device))
        try:
            cubin = compile_cuda(self.source, {}, target_arch(hw.arch, self.variant.spec.arch_specific)).cubin
            return Loaded(cubin, {}, hw), hw
        except CompileError as exc:
            raise RuntimeError(f"{self.path} does not compile for {hw.arch}: {exc}") from None
        except Fail as exc:
            raise RuntimeError(f"{self.path} cannot be loaded: {exc.reason}") from None

    def torch_op(self, namespace: str = "cuda_evolve", name: str | None = None) -> Any:
        """Register the kernel as the PyTorch custom op ``torch.ops.<namespace>.<name>``: its
        inputs are tensors, inouts are updated in place, outputs are returned; a fake
        implementation gives ``torch.compile`` their shapes. Returns the op."""
        import torch

        name = name or self.task.name
        if (namespace, name) in self._ops:
            return self._ops[namespace, name]
        given = self.size_parameters(self.task)
        params, mutated = [], 0
        for arg in self.task.inputs:
            if arg.role == "inout":
                params.append(f"Tensor(a{mutated}!) {arg.name}")
                mutated += 1
            else:
                params.append(f"Tensor {arg.name}")
        params += [f"int {s}" for s in given]
        outs = self.task.fresh_outputs
        ret = "()" if not outs else "Tensor" if len(outs) == 1 else f"({', '.join(['Tensor'] * len(outs))})"
        lib = torch.library.Library(namespace, "FRAGMENT")
        lib.define(f"{name}({', '.join(params)}) -> {ret}")
        inputs = [a.name for a in self.task.inputs]

        def split(values: Sequence[Any]) -> tuple[dict[str, Any], dict[str, int]]:
            arrays = dict(zip(inputs, values, strict=False))
            return arrays, dict(zip(given, values[len(inputs):], strict=True))

        def real(*values: Any) -> Any:
            return self._op_outputs(*split(values))

        def fake(*values: Any) -> Any:
            arrays, sizes = split(values)
            bound = bind(self.task, {k: tuple(v.shape) for k, v in arrays.items()}, sizes)
            first = next(iter(arrays.values()))
            made = [first.new_empty(self.task.shape(a, bound), dtype=getattr(torch, a.dtype)) for a in outs]
            return None if not made else made[0] if len(made) == 1 else tuple(made)

        lib.impl(name, real, "CUDA")
        torch.library.register_fake(f"{namespace}::{name}", fake, lib=lib)
        self._torch_libs.append(lib)
        self._ops[namespace, name] = getattr(getattr(torch.ops, namespace), name)
        return self._ops[namespace, name]

    def _op_outputs(self, arrays: dict[str, Any], sizes: dict[str, int]) -> Any:
        outs = self.task.fresh_outputs
        result = self(**arrays, **sizes)
        made = result if isinstance(result, tuple) else (result,)
        by_name = dict(zip([a.name for a in self.task.outputs], made, strict=True))
        chosen = [by_name[a.name] for a in outs]
        return None if not chosen else chosen[0] if len(chosen) == 1 else tuple(chosen)

    @staticmethod
    def size_parameters(task: Task) -> list[str]:
        """Sizes that no input's shape names plainly (the caller gives them as ints)."""
        plain = {e.text for a in task.inputs for e in a.shape}
        return [s for s in task.correctness_sizes[0] if s not in plain]


# ---- arrays of either library -----------------------------------------------------------------
def _device(a: Any) -> int:
    if _is_torch(a):
        if a.device.type != "cuda":
            raise ValueError(f"a tensor on {a.device} cannot be launched on: move it to the GPU (.cuda())")
        return int(a.device.index or 0)
    dev = getattr(a, "device", None)
    if dev is None or not hasattr(dev, "id"):
        raise TypeError(f"{type(a).__name__} is not on the GPU: pass a CuPy array or a CUDA tensor")
    return int(dev.id)


def _contiguous(a: Any) -> bool:
    return bool(a.is_contiguous()) if _is_torch(a) else bool(a.flags.c_contiguous)


def _stream(first: Any) -> Any:
    """The stream to launch on: PyTorch's current one for tensors, CuPy's for CuPy arrays."""
    import cupy as cp

    if not _is_torch(first):
        return cp.cuda.get_current_stream()
    import torch

    return cp.cuda.ExternalStream(int(torch.cuda.current_stream(first.device).cuda_stream), _device(first))


_TORCH_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _as_cupy(a: Any, task: Task, name: str) -> Any:
    """A CuPy view of the array in the argument's storage (a tensor through DLPack, reinterpreted
    as an integer of its width, since CuPy has no bfloat16 or fp8)."""
    import cupy as cp

    store = dtypes.storage(next(arg.dtype for arg in task.args if arg.name == name))
    if not _is_torch(a):
        return a if a.dtype == store else a.view(store)
    import torch

    if a.numel() == 0:
        return cp.empty(tuple(a.shape), dtype=store)
    bits = a.detach().view(getattr(torch, _TORCH_BITS[a.element_size()]))  # a parameter exports too
    return cp.from_dlpack(bits).view(store)


def _empty_like(first: Any, shape: tuple[int, ...], dtype: str) -> Any:
    if _is_torch(first):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=first.device)
    import cupy as cp

    return cp.empty(shape, dtype=dtypes.storage(dtype))


def _scratch(plan: Plan) -> dict[str, Any]:
    import cupy as cp

    return {s.name: cp.empty(s.count, dtype=dtypes.storage(s.dtype)) for s in plan.scratch}


def _run(loaded: Any, plan: Plan, views: Mapping[str, Any]) -> None:
    from evolve.evaluate.gpu.failure import Crashed, Fail

    try:
        loaded.run(plan, views)
    except Fail as exc:
        raise RuntimeError(exc.reason) from None
    except Crashed as exc:
        raise RuntimeError(f"the kernel failed and the CUDA context is lost: {exc}") from None


# ---- best.py ----------------------------------------------------------------------------------
def function_name(task: Task) -> str:
    name = re.sub(r"\W", "_", task.name)
    name = f"_{name}" if not name or name[0].isdigit() else name
    return f"{name}_" if keyword.iskeyword(name) else name


def best_py(task: Task, run: str, device: str) -> str:
    """The source of best.py for a run's winner (it reads best.cu and best.json beside it)."""
    fn = function_name(task)
    inputs = [a.name for a in task.inputs]
    outputs = [a.name for a in task.fresh_outputs]
    extra = Kernel.size_parameters(task)
    plain = all(n.isidentifier() and not keyword.iskeyword(n) for n in [*inputs, *outputs, *extra])
    if plain:
        params = ", ".join([*inputs, *(f"{o}=None" for o in outputs)])
        sizes = f", *, {', '.join(f'{s}: int | None = None' for s in extra)}" if extra else ""
        names = [*inputs, *outputs]
        call = ", ".join([*(f"{n}={n}" for n in names), *(f"{s}={s}" for s in extra)])
        signature = f"def {fn}({params}{sizes}):"
    else:
        signature, call = f"def {fn}(*args, **kwargs):", "*args, **kwargs"
    returned = [a.name for a in task.outputs]
    args_doc = "\n".join(f"        {a.name}: {a.role} {a.dtype}[{', '.join(e.text for e in a.shape)}]"
                         for a in task.args)
    description = textwrap.fill(f"Task {task.name}: {task.description.strip() or '(no description)'}", 96,
                                subsequent_indent="    ")
    example_in = ", ".join(inputs)
    example_out = ", ".join(returned)
    return f'''"""The kernel cuda-evolve found for task {task.name} (run {run}, on {device}), ready to call.

    import best
    {example_out} = best.{fn}({example_in})  # CuPy arrays or CUDA tensors; outputs are allocated
    best.{fn}({example_in}{"".join(f", {o}={o}" for o in outputs)})  # or written into the arrays you pass

Sizes are read from the shapes; shapes, dtypes, device and contiguity are checked; the launch is
computed from the sizes by the plan the evaluator used. best.cu is compiled once for your GPU
(NVRTC, cached) and loaded once per GPU. Tensors stay where they are (DLPack) and the kernels run
on PyTorch's current stream. register_torch_op() makes it torch.ops.cuda_evolve.{fn}.
Needs cuda-evolve and CuPy where it runs (pip install -e ".[cuda13]" in cuda-evolve's checkout).
"""

from pathlib import Path

from evolve.results.usage import Kernel

kernel = Kernel.load(Path(__file__).with_name("best.cu"))


{signature}
    """{description}

    Arguments (role dtype[shape]):
{args_doc}
    Returns {", ".join(returned)}{" (a tuple)" if len(returned) > 1 else ""}.
    """
    return kernel({call})


def register_torch_op(namespace="cuda_evolve"):
    """Register {fn} as the PyTorch op torch.ops.<namespace>.{fn} (inouts in place)."""
    return kernel.torch_op(namespace, "{fn}")
'''
