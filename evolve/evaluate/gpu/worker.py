"""The GPU worker process and its handle in the search process.

Candidates run in a separate ``spawn``-ed process, one per GPU: a hung kernel is killed with
its process when the wall-clock limit passes, and a poisoned CUDA context (illegal address,
trap) ends the process, which is restarted. The search process never touches CUDA.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import threading
from multiprocessing.connection import Connection
from typing import Any

from evolve.errors import EvolveError
from evolve.evaluate.gpu.lifetime import die_with_parent
from evolve.paths import install_command

STARTUP_TIMEOUT_S = 120.0
SCRUBBED_ENV = ("OPENAI_API_KEY", "EVOLVE_POSTGRES_URL", "EVOLVE_LLM_BASE_URL")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)
_spawn_lock = threading.Lock()


def _secret(name: str) -> bool:
    return name in SCRUBBED_ENV or bool(_SECRET_NAME.search(name))


def start_without_secrets(proc: Any) -> None:
    """Start a ``spawn`` process that never sees API keys or database passwords."""
    with _spawn_lock:
        saved = {k: os.environ.pop(k) for k in list(os.environ) if _secret(k)}
        try:
            proc.start()
        finally:
            os.environ.update(saved)


def serve(conn: Connection, device: int) -> None:
    """Worker main loop: answer requests until told to stop or the context is poisoned."""
    die_with_parent()  # a worker left running by a killed search would hold the GPU
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the search process's to handle
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # whatever a kernel might print never reaches the user's terminal
    try:
        import cupy as cp

        from evolve.evaluate.gpu import device as gpu_device
        from evolve.evaluate.gpu import harness as gpu
        from evolve.evaluate.gpu.failure import Crashed

        cp.cuda.Device(device).use()
        props = gpu_device.device_properties(device)
    except ImportError as exc:
        conn.send(("error", f"CuPy is not installed ({exc}): {install_command('cuda13')} (or cuda12)"))
        return
    except Exception as exc:
        conn.send(("error", f"no usable CUDA GPU ({exc.__class__.__name__}: {str(exc)[:200]})"))
        return
    conn.send(("ready", props))
    evaluator, init = None, {}
    while True:
        try:
            op, payload = conn.recv()
        except EOFError:
            return
        try:
            if op == "init":
                import dataclasses

                from evolve.hardware import Hardware
                from evolve.settings import TimingSettings
                from evolve.task.task import load_task

                init = payload
                task = dataclasses.replace(load_task(payload["task"]),
                                           correctness_sizes=tuple(payload["correctness_sizes"]))
                evaluator = gpu.GpuEvaluator(
                    task,
                    Hardware.from_dict(payload["hardware"]),
                    TimingSettings.from_config(payload["settings"]),
                    payload["secret"],
                )
                from evolve.task.correctness import warm_up

                warm_up(cp, task)  # the harness's kernels compiled now, not in the first trial
                conn.send(("ok", None))
            elif op == "evaluate":
                try:
                    m = evaluator.evaluate(payload["source"], payload["tunables"], payload["sizes"],
                                           on_compiled=lambda: conn.send(("stage", "compiled")))
                except Crashed:
                    raise
                except Exception as exc:  # whatever a candidate provoked is that candidate's end
                    raise Crashed(f"the evaluator failed on this candidate ({exc.__class__.__name__}: "
                                  f"{str(exc)[:500]})") from None
                conn.send(("ok", m.to_dict()))
            elif op == "profile":
                from evolve.evaluate.gpu import profiling

                conn.send(("ok", profiling.run(init["task"], init["hardware"], device, payload["source"],
                                               payload["tunables"], payload["sizes"], payload["timeout_s"])))
            elif op == "ceilings":
                conn.send(("ok", evaluator.ceilings()))
            elif op == "stop":
                return
        except Crashed as exc:
            conn.send(("crashed", str(exc)[:1000]))
            conn.close()
            # The context may be unusable: leave at once, skipping CuPy's cleanup, which would only
            # print a traceback for every buffer it can no longer free. The parent starts a new one.
            os._exit(3)
        except Exception as exc:
            conn.send(("error", f"{exc.__class__.__name__}: {str(exc)[:1000]}"))


def gpu_holders() -> str:
    """What else is on the GPU, for a worker that did not start: most often a process left by an
    earlier run (a kernel that never ends, a profiler replaying one) keeps every new context
    waiting. Empty where nvidia-smi cannot tell."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    apps = [" ".join(line.split()) for line in out.splitlines() if line.strip()][:5]
    return f"; processes on the GPU: {'; '.join(apps)} (one left by an earlier run holds it?)" if apps else ""


class WorkerDied(Exception):
    """The worker exited or was killed; ``reason`` says how."""


class WorkerTimeout(Exception):
    """The worker did not answer in time and was killed; ``stage`` says what it was doing."""

    def __init__(self, message: str, stage: str = ""):
        super().__init__(message)
        self.stage = stage


class Worker:
    """A handle on one worker process bound to one GPU; restarts it on demand."""

    def __init__(self, device: int):
        self.device = device
        self.init: dict[str, Any] = {}  # sent after every (re)start, once set
        self.props: dict[str, Any] = {}
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None

    def start(self) -> dict[str, Any]:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(
            target=serve, args=(child, self.device), daemon=True, name=f"evolve-gpu{self.device}"
        )
        start_without_secrets(self._proc)
        child.close()
        self._conn = parent
        try:
            op, props = self._recv(STARTUP_TIMEOUT_S)
        except WorkerTimeout as exc:
            raise EvolveError(f"the GPU worker did not start: {exc}{gpu_holders()}") from None
        except WorkerDied as exc:
            raise EvolveError(f"the GPU worker did not start: {exc}") from None
        if op != "ready":
            self.close()
            raise EvolveError(props)
        self.props = props
        if self.init:
            self.call("init", self.init, STARTUP_TIMEOUT_S)
        return props

    def call(self, op: str, payload: Any, timeout: float, first_stage: float | None = None) -> Any:
        """Send one request; kill the process if it hangs or dies, then raise. With
        ``first_stage``, the worker must report its first stage (compiling) within that time."""
        if self._proc is None or not self._proc.is_alive():
            self.start()
        assert self._conn is not None
        self._conn.send((op, payload))
        kind, result = self._recv(first_stage if first_stage is not None else timeout,
                                  stage="compile" if first_stage is not None else "")
        if kind == "stage":
            kind, result = self._recv(timeout)
        if kind == "ok":
            return result
        if kind == "crashed":
            self._reap()
            raise WorkerDied(result)
        raise EvolveError(f"GPU worker failed: {result}")

    def _recv(self, timeout: float, stage: str = "") -> tuple[str, Any]:
        assert self._conn is not None
        if not self._conn.poll(timeout):
            self._kill()
            raise WorkerTimeout(f"no answer within {timeout:.0f} s", stage)
        try:
            return self._conn.recv()
        except (EOFError, ConnectionError):
            code = self._reap()
            raise WorkerDied(f"worker process exited (code {code})") from None

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()

    def _reap(self) -> int | None:
        code = None
        if self._proc is not None:
            self._proc.join(timeout=30)
            code = self._proc.exitcode
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None
        return code

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive() and self._conn is not None:
            try:
                self._conn.send(("stop", None))
                self._proc.join(timeout=10)
            except (BrokenPipeError, OSError):
                pass
        self._kill()
