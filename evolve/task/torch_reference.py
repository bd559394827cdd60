"""The reference of a task made from a PyTorch problem file (:mod:`evolve.task.torch_task`): its Model."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from evolve import dtypes
from evolve.task.torch_problem import TORCH_DTYPES, Instance, problem_of

log = logging.getLogger(__name__)


class TorchReference:
    """The Model of a torch task's configuration as its float64 reference (or, ``native=True``, in
    its own dtypes: the float32 run that the tolerance must admit). Built on the CPU once per size.
    NumPy arrays (``backend=check``) are run on the CPU; CuPy arrays (the worker) on their GPU,
    where float64 is fast and a multi-gigabyte tensor costs no copy through the host: the Model is
    moved there for the call and back after it, its outputs copied into CuPy arrays, and PyTorch's
    cached memory released, so nothing of the reference is in device memory while a candidate
    runs. Where the GPU's memory does not hold the reference, it runs on the CPU."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        t = cfg["torch"]
        self.problem = problem_of(cfg)
        self.size_names = list(t["sizes"])
        self.inputs, self.state = list(t["inputs"]), dict(t["state"])
        # the forward's arguments in order: a task input's name, or a constant's (name, value)
        arg_of = {fwd: arg for arg, fwd in t["inputs"].items()}
        constants = dict(t.get("constants") or {})
        self.forward = [(n, constants[n]) if n in constants else (arg_of[n], None)
                        for n in t.get("forward") or t["inputs"].values()]
        self.outputs = list(t["outputs"])
        self.dtypes = {k: str(a.get("dtype", "float32")) for k, a in cfg["args"].items()}
        self._models: dict[tuple[str, bool], torch.nn.Module] = {}
        self._said_cpu = False  # the fall-back to the CPU is logged once

    def __call__(self, xp: Any, x: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
        return self.run(xp, x, sizes, native=False)

    def run(self, xp: Any, x: Mapping[str, Any], sizes: Mapping[str, int], native: bool) -> dict[str, Any]:
        plain = {k: int(sizes[k]) for k in self.size_names}
        key = (",".join(f"{k}={v}" for k, v in plain.items()), native)
        model = self._models.get(key)
        if model is None:
            model = self.problem.build(plain).model
            if not native:
                model.double()
            self._models = {key: model}  # one size at a time: sizes come in order
        if xp is not np and not native and torch.cuda.is_available():
            try:
                return self._on_gpu(xp, model, x)
            except torch.cuda.OutOfMemoryError:  # the host has more memory: run it there
                if not self._said_cpu:
                    log.warning("%s: the float64 reference does not fit in the GPU's memory beside the "
                                "candidate's buffers; it runs on the CPU (slowly)", self.problem.path.name)
                    self._said_cpu = True
        host = {k: v if xp is np else xp.asnumpy(v) for k, v in x.items()}
        t = {k: self._tensor(k, np.ascontiguousarray(v), native) for k, v in host.items()}
        model.load_state_dict({key: t[arg] for arg, key in self.state.items()}, strict=True)
        with torch.no_grad():
            outs = self._instance(model, t).run()
        res = {n: o.detach().to(torch.float64 if o.is_floating_point() else o.dtype).numpy()
               for n, o in zip(self.outputs, outs, strict=True)}
        return res if xp is np else {k: xp.asarray(v) for k, v in res.items()}

    def _on_gpu(self, xp: Any, model: torch.nn.Module, x: Mapping[str, Any]) -> dict[str, Any]:
        device = torch.device("cuda", xp.cuda.Device().id)
        try:
            t = {k: self._tensor(k, torch.as_tensor(v, device=device), False, copy=True)
                 for k, v in x.items()}
            model.to(device)
            model.load_state_dict({key: t[arg] for arg, key in self.state.items()}, strict=True)
            outs = self._instance(model, t).run()
            wide = [o.detach().to(torch.float64 if o.is_floating_point() else o.dtype) for o in outs]
            torch.cuda.synchronize(device)  # PyTorch's stream done before CuPy's copies read it
            return {n: xp.array(o, copy=True) for n, o in zip(self.outputs, wide, strict=True)}
        finally:
            t = outs = wide = None  # released before the cache is emptied
            model.to("cpu")
            # cuBLAS keeps a workspace per stream in PyTorch's allocator (33 MiB on the H200)
            getattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None)()
            torch.cuda.empty_cache()

    def _instance(self, model: torch.nn.Module, t: Mapping[str, torch.Tensor]) -> Instance:
        return Instance(model, {n: t[n] if v is None else v for n, v in self.forward})

    def _tensor(self, arg: str, v: np.ndarray | torch.Tensor, native: bool, copy: bool = False
                ) -> torch.Tensor:
        d = dtypes.get(self.dtypes[arg])
        t = torch.from_numpy(v) if isinstance(v, np.ndarray) else v
        own = next(k for k, n in TORCH_DTYPES.items() if n == d.name)
        # copy: a tensor made over a CuPy array shares its memory, and a Model may work in place
        return t.to(own if d.kind != "float" or native else torch.float64, copy=copy)
