"""Evaluator processes of this node (``evaluators=N|auto``): one ``role=evaluate`` process per GPU,
each pinned with CUDA_VISIBLE_DEVICES, all on the run's study; Optuna's storage is the only link."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from hydra.core.hydra_config import HydraConfig

from evolve.errors import EvolveError
from evolve.settings import EvolveConfig

log = logging.getLogger("evolve")


# set in the evaluators this process starts: they share its terminal, where this process alone
# says that the run resumes and what it found
HELPER = "EVOLVE_STARTED_EVALUATOR"


def started_here() -> bool:
    """Whether this process is an evaluator that another ``evolve`` started (``evaluators=N``)."""
    return os.environ.get(HELPER) == "1"


def start_evaluators(c: EvolveConfig) -> list[subprocess.Popen[bytes]]:
    """Start the evaluators ``evaluators`` asks for (none for ``evaluators=1``: this process evaluates)."""
    if c.evaluators == "1":
        return []
    if c.evaluators != "auto" and not c.evaluators.isdigit():
        raise EvolveError(f"evaluators must be a number or auto, got {c.evaluators!r}")
    gpus = visible_gpus()
    n = len(gpus) if c.evaluators == "auto" else int(c.evaluators)
    if n < 1:
        raise EvolveError("evaluators=auto found no GPU (nvidia-smi lists none)" if c.evaluators == "auto"
                          else "evaluators must be at least 1")
    if c.storage.kind == "rdb" and str(c.storage.url or "").startswith("sqlite"):
        raise EvolveError("several evaluators need storage=postgres (or storage=journal on one node)")
    overrides = [o for o in HydraConfig.get().overrides.task
                 if not o.startswith(("evaluators=", "role=", "evaluator=", "run.name="))]
    overrides += [f"--config-dir={s.path}" for s in HydraConfig.get().runtime.config_sources
                  if s.provider == "command-line"]  # where an --config-dir task lives
    procs = []
    for i in range(n):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)] if gpus else str(i), HELPER: "1"}
        pin = ["backend.device=0"]  # the one GPU it sees
        cmd = [sys.executable, "-m", "evolve", *overrides, "role=evaluate", "evaluators=1", f"evaluator={i}",
               *pin, f"run.name={c.run.name}", "search.progress=false"]
        procs.append(subprocess.Popen(cmd, env=env))
    log.info("started %d evaluator process(es)%s", n, f" on GPU(s) {', '.join(gpus)}" if gpus else "")
    return procs


def visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip()]
    return [str(i) for i in range(len(nvidia_smi_gpus()))]


def nvidia_smi_gpus() -> list[str]:
    """The GPUs the NVIDIA driver lists (none without a driver), read without touching CUDA."""
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.stdout.splitlines() if line.startswith("GPU ")]


def wait_for(procs: list[subprocess.Popen[bytes]]) -> str:
    """Wait for every evaluator; one that failed fails the run."""
    codes = [p.wait() for p in procs]
    if any(codes):
        raise EvolveError(f"evaluator process(es) failed with exit codes {codes}")
    return "budget"
