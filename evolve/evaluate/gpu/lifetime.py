"""Child processes that end with the process that started them.

A GPU worker or a profiled candidate left behind by a killed search keeps its kernel on the GPU:
with Nsight Compute replaying a kernel that never ends, every later CUDA context on that GPU
waits, and the next run's worker never starts. So each child asks the kernel for SIGKILL when its
parent goes (Linux ``PR_SET_PDEATHSIG``). That reaches one process: ``ncu`` is a launcher that
forks the binary which replays the kernel (on the H200 that binary outlived a killed worker), so
the profiler runs under ``python -m evolve.evaluate.gpu.lifetime``: a process group of its own
inside the caller's session, whose leader kills the whole group when its parent goes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Send this process ``sig`` when its parent exits (Linux; elsewhere nothing happens). Safe to
    call between fork and exec, where it survives the exec."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent went before the request was made
        os._exit(1)


def group_command(cmd: list[str]) -> list[str]:
    """``cmd`` run so that every process it forks ends with the caller; start it with
    ``process_group=0`` (a group of its own: ``os.killpg`` on its pid ends all of it)."""
    return [sys.executable, "-m", "evolve.evaluate.gpu.lifetime", *cmd]


def main(cmd: list[str]) -> int:
    """Run ``cmd`` in this process's group; when the parent goes, SIGKILL the group."""
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))
    die_with_parent(signal.SIGTERM)
    return subprocess.Popen(cmd).wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
