"""On the GPU (pytest -m gpu): a search killed while its worker or its profiler runs a kernel that
never ends leaves no process on the GPU, and the next worker starts at once. Before lifetime.py,
ncu replaying such a kernel outlived a killed run and the next run's worker never started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from evolve.evaluate.cupy_backend import CupyBackend
from evolve.paths import ROOT
from tests.helpers.runs import gone
from tests.helpers.tasks import task

SPIN = """/*@evolve
kernels:
  - {name: spin_forever, grid: 1, block: 32, args: [a, b, c, n]}
*/
extern "C" __global__ void spin_forever(const float* a, const float* b, float* c, int n) {
    while (n > 0) { c[0] = a[0]; }
}
"""

PARENT = """
import sys
from evolve.evaluate.cupy_backend import CupyBackend
from evolve.kernel.spec import Variant
from evolve.task.task import builtin_task
t = builtin_task("vector_add")
b = CupyBackend({"timeout_s": 600, "timing": {}, "profile_timeout_s": 600, "compile_ahead": 0})
b.start(t, None)
print(b.worker._proc.pid, flush=True)
v = Variant.parse(sys.argv[2])
if sys.argv[1] == "profile":
    b.profile(v, {}, t.timing_sizes[0])
else:
    b.evaluate(v, {}, t.timing_sizes[:1])
"""


def _below(pid: int) -> list[int]:
    """The process and all its descendants."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [pid, *(d for c in out.split() for d in _below(int(c)))]


@pytest.mark.parametrize("how", ["evaluate", "profile"])
def test_a_killed_search_leaves_nothing_on_the_gpu(how: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how, SPIN], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        worker = int(parent.stdout.readline())
        time.sleep(8)  # the kernel is running (under ncu: ncu and its child started)
        below = _below(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        left = [p for p in below if not gone(p, 15)]
        said = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:20,args", "-p", ",".join(map(str, left))],
                              capture_output=True, text=True).stdout if left else ""
        for p in left:
            os.kill(p, signal.SIGKILL)
        assert not left, f"processes outlived the killed search (of {below}):\n{said}"
    finally:
        parent.kill()
    t = task("vector_add")
    b = CupyBackend({"timeout_s": 60, "timing": {}, "compile_ahead": 0})
    try:
        start = time.monotonic()
        b.start(t, None)
        assert time.monotonic() - start < 60
        seed = t.seeds()[0]
        assert b.evaluate(seed, seed.spec.default, t.timing_sizes[:1]).ok
    finally:
        b.close()
