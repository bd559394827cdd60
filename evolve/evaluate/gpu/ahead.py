"""Compiling ahead: while the GPU measures one candidate, the next ones are compiled by helper
processes into the compile cache, where the worker finds them. NVRTC takes most of an
evaluation for large kernels (sgemm: ~60%), so this roughly doubles the candidates per minute.

Helpers only compile (NVRTC; no device code runs), each in its own ``spawn``-ed process without
API keys or passwords, and a compile that outlives the time limit is killed with its process.
A failed or slow compile ahead costs nothing: the worker compiles the candidate itself and
reports whatever error there is. When the worker's turn comes while a helper is still compiling
that candidate, the search waits for the helper (it has a head start) rather than compiling it a
second time; a candidate still queued is dropped from the helpers' queue.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from evolve.evaluate.gpu.lifetime import die_with_parent
from evolve.evaluate.gpu.worker import start_without_secrets

Job = tuple[str, dict[str, Any], str]  # source, defines, arch
STARTUP_S = 120.0  # a helper's start (spawn, imports), before its compile's time limit begins


def _key(job: Job) -> tuple[str, tuple[tuple[str, str], ...], str]:
    source, defines, arch = job
    return source, tuple(sorted((k, str(v)) for k, v in defines.items())), arch


def _serve(conn: Connection) -> None:
    from evolve.kernel.compiler import compile_cuda, load_compiler

    die_with_parent()
    with contextlib.suppress(Exception):  # a second, on a loaded machine several
        load_compiler()
    conn.send("ready")  # from here on the time limit is the compile's alone
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
        self.processes = processes
        self.timeout_s = timeout_s
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._ctx = mp.get_context("spawn")
        self._procs: list[Any] = []
        self._lock = threading.Lock()
        self._queued: set[Any] = set()
        self._running: dict[Any, threading.Event] = {}
        self._threads = [threading.Thread(target=self._run, daemon=True, name=f"evolve-compile-{i}")
                         for i in range(processes)]
        for t in self._threads:
            t.start()

    def submit(self, source: str, defines: Mapping[str, Any], arch: str) -> None:
        job = (source, dict(defines), arch)
        with self._lock:
            self._queued.add(_key(job))
        self._jobs.put(job)

    def wait(self, source: str, defines: Mapping[str, Any], arch: str) -> None:
        """Before the worker compiles this candidate: let a helper that is compiling it finish
        (up to the time limit); drop it from the queue if no helper has started it."""
        key = _key((source, dict(defines), arch))
        with self._lock:
            self._queued.discard(key)
            done = self._running.get(key)
        if done is not None:
            done.wait(self.timeout_s)

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
        # a loaded machine can take seconds to start Python and import NVRTC: not the compile's time
        if not parent.poll(STARTUP_S):
            proc.kill()
            raise OSError("a compile helper did not start")
        parent.recv()
        return proc, parent

    def _run(self) -> None:
        proc = conn = None
        while (job := self._jobs.get()) is not None:
            key, done = _key(job), threading.Event()
            with self._lock:
                if key not in self._queued:  # the worker got to it first
                    continue
                self._queued.discard(key)
                self._running[key] = done
            try:
                try:
                    if proc is None or not proc.is_alive():
                        proc, conn = self._start()
                    assert conn is not None
                    conn.send(job)
                    if conn.poll(self.timeout_s):
                        conn.recv()
                        continue
                except (OSError, EOFError):
                    pass
                if proc is not None:
                    proc.kill()  # too slow (a compile bomb) or died: the next job gets a fresh process
                proc = None
            finally:
                with self._lock:
                    self._running.pop(key, None)
                done.set()
        if proc is not None:
            conn.close()
            proc.join(timeout=5)
