"""Compiling ahead: while the GPU measures one candidate, the next ones are compiled by helper
processes into the compile cache, where the worker finds them. NVRTC takes most of an
evaluation for large kernels (sgemm: ~60%), so this roughly doubles the candidates per minute.

Helpers only compile (NVRTC; no device code runs), each in its own ``spawn``-ed process without
API keys or passwords, and a compile that outlives the time limit is killed with its process.
A failed or slow compile ahead costs nothing: the worker compiles the candidate itself and
reports whatever error there is.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from evolve.backends.worker import start_without_secrets

Job = tuple[str, dict[str, Any], str]  # source, defines, arch


def _serve(conn: Connection) -> None:
    from evolve.compiler import compile_cuda

    while True:
        try:
            source, defines, arch = conn.recv()
        except EOFError:
            return
        with contextlib.suppress(Exception):  # the worker compiles it again and reports the error
            compile_cuda(source, defines, arch)
        conn.send(True)


class CompileAhead:
    def __init__(self, processes: int, timeout_s: float):
        self.timeout_s = timeout_s
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._ctx = mp.get_context("spawn")
        self._procs: list[Any] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True, name=f"evolve-compile-{i}")
                         for i in range(processes)]
        for t in self._threads:
            t.start()

    def submit(self, source: str, defines: Mapping[str, Any], arch: str) -> None:
        self._jobs.put((source, dict(defines), arch))

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        with self._lock:
            for p in self._procs:
                if p.is_alive():
                    p.kill()

    def _start(self) -> tuple[Any, Connection]:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_serve, args=(child,), daemon=True, name="evolve-compile")
        start_without_secrets(proc)
        child.close()
        with self._lock:
            self._procs.append(proc)
        return proc, parent

    def _run(self) -> None:
        proc = conn = None
        while (job := self._jobs.get()) is not None:
            if proc is None or not proc.is_alive():
                proc, conn = self._start()
            assert conn is not None
            try:
                conn.send(job)
                if conn.poll(self.timeout_s):
                    conn.recv()
                    continue
            except (OSError, EOFError):
                pass
            proc.kill()  # too slow (a compile bomb) or died: the next job gets a fresh process
            proc = None
        if proc is not None:
            conn.close()
            proc.join(timeout=5)
