"""Child processes that end with the process that started them.

A GPU worker or a profiled candidate left behind by a killed search keeps its kernel on the GPU:
with Nsight Compute replaying a kernel that never ends, every later CUDA context on that GPU
waits, and the next run's worker never starts. So each child asks the kernel for SIGKILL when its
parent goes (Linux ``PR_SET_PDEATHSIG``), and the profiler runs in a process group of its own
inside the caller's session, so that whoever ends the session ends it too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when its parent exits (Linux; elsewhere nothing happens). Safe to call
    between fork and exec, where it survives the exec."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent went before the request was made
        os._exit(1)
