"""The reference of a task made from a PyTorch problem file (:mod:`evolve.task.torch_task`): its Model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evolve import dtypes
from evolve.errors import EvolveError
from evolve.task.torch_problem import TORCH_DTYPES, Instance, Problem


class TorchReference:
    """The Model of a torch task's configuration as its float64 reference (or, ``native=True``, in
    its own dtypes: the float32 run that the tolerance must admit). Built on the CPU once per size;
    arrays of another module (CuPy) are copied through the host, so nothing of PyTorch stays on
    the GPU."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        t = cfg["torch"]
        self.problem = Problem(Path(str(t["file"])), t.get("function"), bool(t.get("follow", True)))
        if self.problem.sha256 != t["sha256"]:
            raise EvolveError(f"problem file {self.problem.path} changed since the task was made from it")
        self.size_names = list(t["sizes"])
        self.inputs, self.state = list(t["inputs"]), dict(t["state"])
        self.outputs = list(t["outputs"])
        self.dtypes = {k: str(a.get("dtype", "float32")) for k, a in cfg["args"].items()}
        self._models: dict[tuple[str, bool], torch.nn.Module] = {}

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
        host = {k: v if xp is np else xp.asnumpy(v) for k, v in x.items()}
        t = {k: self._tensor(k, np.ascontiguousarray(v), native) for k, v in host.items()}
        model.load_state_dict({key: t[arg] for arg, key in self.state.items()}, strict=True)
        with torch.no_grad():
            outs = Instance(model, {n: t[n] for n in self.inputs}).run()
        res = {n: o.detach().to(torch.float64 if o.is_floating_point() else o.dtype).numpy()
               for n, o in zip(self.outputs, outs, strict=True)}
        return res if xp is np else {k: xp.asarray(v) for k, v in res.items()}

    def _tensor(self, arg: str, v: np.ndarray, native: bool) -> torch.Tensor:
        d = dtypes.get(self.dtypes[arg])
        t = torch.from_numpy(v)
        if d.kind != "float":
            return t.to(next(k for k, n in TORCH_DTYPES.items() if n == d.name))
        return t.to(next(k for k, n in TORCH_DTYPES.items() if n == d.name)) if native else t.double()
