"""Optional last check of a winner under NVIDIA's compute-sanitizer (``search.sanitize=true``).

memcheck finds out-of-bounds and misaligned accesses the guard zones cannot see (inside another
allocation, or reads that happen not to change the result); racecheck finds shared-memory races.
The candidate runs the correctness check at the task's small sizes in a process of its own,
started under the sanitizer. Run as a module: ``python -m evolve.evaluate.gpu.sanitize request.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evolve.hardware import Hardware
from evolve.kernel.spec import Variant
from evolve.task.task import Task

TOOLS = ("memcheck", "racecheck")
_SUMMARY = re.compile(r"(?:ERROR SUMMARY:\s*|\()(\d+)\s+errors?\b")  # memcheck; racecheck


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "compute-sanitizer").is_file():
            return str(Path(root) / "bin" / "compute-sanitizer")
    return None


def sanitize(task: Task, hw: Hardware, variant: Variant, tunables: Mapping[str, int],
             timeout_s: float = 600.0) -> dict[str, Any]:
    """Each tool's verdict: {"tool": {"errors": n, "output": tail}}, or why it could not run."""
    exe = find_sanitizer()
    if exe is None:
        return {"skipped": "compute-sanitizer not found (it comes with the CUDA toolkit)"}
    small = sorted(task.correctness_sizes, key=lambda s: sum(s.values()))[:3]
    request = {"task": dict(task.config), "hardware": hw.to_dict(), "source": variant.source,
               "tunables": dict(tunables), "sizes": small}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(json.dumps(request))
        for tool in TOOLS:
            cmd = [exe, "--tool", tool, "--print-limit", "20", sys.executable, "-m",
                   "evolve.evaluate.gpu.sanitize", str(path)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                out[tool] = {"errors": None, "output": f"stopped after {timeout_s:.0f} s"}
                continue
            text = done.stdout + done.stderr
            m = _SUMMARY.search(text)
            out[tool] = {"errors": int(m.group(1)) if m else None, "exit": done.returncode,
                         "output": "\n".join(text.strip().splitlines()[-15:])}
    return out


def _main(path: str) -> int:
    """Inside the sanitizer: run the candidate's correctness check once at the small sizes."""
    import dataclasses

    from evolve.evaluate.gpu.harness import GpuEvaluator
    from evolve.settings import TimingSettings
    from evolve.task.task import load_task

    req = json.loads(Path(path).read_text())
    task = dataclasses.replace(load_task(req["task"]), correctness_sizes=tuple(req["sizes"]))
    ev = GpuEvaluator(task, Hardware.from_dict(req["hardware"]), TimingSettings(rounds=1), secret=1)
    m = ev.evaluate(req["source"], req["tunables"], req["sizes"][:1])
    print(f"sanitize: {m.status.value} {m.reason}")
    return 0 if m.ok else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
