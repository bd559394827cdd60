"""A child of the evaluator ends with it: a GPU worker or a profiler left behind by a killed search
keeps its kernel on the GPU and stalls the next run's worker at its start (lifetime.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evolve.paths import ROOT
from tests.helpers.runs import gone

PARENT = """
import sys
from evolve.evaluate.gpu import profiling
profiling.ncu_path = lambda: sys.argv[1]
print(profiling.run({}, {}, 0, sys.argv[2], {}, {}, 600), flush=True)
"""

SPEC = """/*@evolve
kernels:
  - {name: k, grid: 1, block: 32, args: [c]}
*/
extern "C" __global__ void k(float* c) {}
"""




@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_profiler_dies_with_the_worker_that_started_it(tmp_path: Path) -> None:
    """A stand-in for ncu that never returns (as ncu replaying a kernel that never ends) and, as
    ncu's launcher does, forks the process that runs: when the worker is killed, that goes too.
    Started in a session of its own, it outlived its parent; under PR_SET_PDEATHSIG alone, the
    forked one did (seen on the H200 with ncu 2025.3)."""
    pidfile = tmp_path / "ncu.pid"
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pidfile}\nwait\n")
    ncu.chmod(0o755)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(ncu), SPEC], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline and parent.poll() is None, "the stand-in never started"
            time.sleep(0.05)
        ncu_pid = int(pidfile.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        if not gone(ncu_pid, 10):
            os.kill(ncu_pid, signal.SIGKILL)
            pytest.fail("the profiler outlived the worker that started it")
    finally:
        parent.kill()
