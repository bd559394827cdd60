"""Profiling one candidate under Nsight Compute; the GPU worker's, for ``evolution.profile``.

The worker starts ``ncu`` on a fresh Python process (``python -m evolve.evaluate.gpu.profiling
REQUEST``) that compiles the candidate (a cubin cache hit: it was just measured), fills its inputs,
enqueues one call of its plan and exits. ncu replays each of the plan's kernels to read its
counters (``--clock-control none``: the clocks are left alone) and writes CSV that
``evolve.evaluate.profile`` reads. The candidate runs under the same checks as when it was measured (its
parameters against the spec, its module's limits), in a process of its own that is killed after
the time limit; no text of the candidate reaches a command line (the request is a JSON file).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evolve.errors import EvolveError
from evolve.evaluate import profile
from evolve.evaluate.gpu.lifetime import die_with_parent, group_command
from evolve.kernel.spec import Variant


def ncu_path() -> str:
    """The ncu executable: on PATH, else under CUDA_HOME / CUDA_PATH / /usr/local/cuda."""
    found = shutil.which("ncu")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (path := Path(root) / "bin" / "ncu").is_file():
            return str(path)
    raise EvolveError("evolution.profile needs Nsight Compute's ncu (not found on PATH or in CUDA_HOME/bin)")


def run(task_config: Mapping[str, Any], hardware: Mapping[str, Any], device: int, source: str,
        tunables: Mapping[str, int], sizes: Mapping[str, int], timeout_s: float) -> dict[str, Any]:
    """The candidate's profile at these sizes (``profile.summarize``), or ``{"error": why}`` when
    this candidate could not be profiled. Raises EvolveError when nothing can be profiled here
    (no ncu, no access to the performance counters)."""
    variant = Variant.parse(source)
    kernels = sorted({launch.kernel for launch in variant.spec.launches})
    with tempfile.TemporaryDirectory(prefix="evolve-profile-") as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({"task": dict(task_config), "hardware": dict(hardware),
                                       "device": device, "source": source, "tunables": dict(tunables),
                                       "sizes": dict(sizes)}))
        cmd = [ncu_path(), "--clock-control", "none", "--csv", "--page", "raw", "--metrics",
               ",".join(profile.metrics()), "--kernel-name", f"regex:^({'|'.join(kernels)})$",
               "--launch-count", "64", sys.executable, "-m", "evolve.evaluate.gpu.profiling", str(request)]
        # a process group of its own (on the time limit, ncu and the process it profiles die
        # together) in the worker's session, which dies with the worker (lifetime.py says why)
        proc = subprocess.Popen(group_command(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp, process_group=0)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"ncu took longer than {timeout_s:.0f} s; stopped"}
    rows = profile.parse_csv(stdout)
    if rows:
        return profile.summarize(rows)
    said = "\n".join(line for line in (stderr + stdout).splitlines() if line.strip())
    if "ERR_NVGPUCTRPERM" in said or "Failed to initialize the profiler" in said:
        raise EvolveError(f"ncu cannot read this GPU's performance counters: {_last(said)}")
    return {"error": f"ncu profiled no kernel (exit code {proc.returncode}): {_last(said)}"}


def _last(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


def main(path: str) -> None:
    """The process ncu watches: one call of the candidate on freshly filled inputs."""
    import cupy as cp

    from evolve import dtypes
    from evolve.evaluate.gpu.device import synchronize
    from evolve.evaluate.gpu.harness import GpuEvaluator
    from evolve.hardware import Hardware
    from evolve.settings import TimingSettings
    from evolve.task.task import load_task

    die_with_parent()  # ncu's child: ends with ncu
    req = json.loads(Path(path).read_text())
    cp.cuda.Device(req["device"]).use()
    task, sizes = load_task(req["task"]), {k: int(v) for k, v in req["sizes"].items()}
    arrays = {a.name: cp.empty(task.shape(a, sizes), dtypes.storage(a.dtype)) for a in task.args}
    task.fill_inputs(cp, arrays, int.from_bytes(os.urandom(8), "little") >> 1, sizes)
    ev = GpuEvaluator(task, Hardware.from_dict(req["hardware"]), TimingSettings(), secret=0)
    call = ev.launcher(req["source"], req["tunables"], sizes, arrays)
    call()
    synchronize("under the profiler")


if __name__ == "__main__":
    main(sys.argv[1])
