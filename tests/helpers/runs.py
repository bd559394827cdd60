"""Shared by the tests: runs of the evolve command, in-process and as a subprocess, and their studies."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import optuna
import yaml
from hydra import compose, initialize_config_dir
from optuna.trial import TrialState

import evolve.settings
from evolve.app.check import check_task
from evolve.app.run import run
from evolve.paths import CONF_DIR, ROOT
from evolve.record.schema import Attr, counts_toward_budget
from evolve.record.variants import VariantStore
from evolve.results.bestpy import best_py
from evolve.task.task import Task


def marked(name: str, value: str, command: str) -> list[int]:
    """The processes whose environment has ``name=value`` and whose command line holds
    ``command``: a test's own descendants, reparented or not, and none of a parallel test's."""
    want, found = f"{name}={value}".encode(), []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and want in (proc / "environ").read_bytes().split(b"\0") and \
                    command.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:  # ended while read, or not ours to read
            continue
    return found


def gone(pid: int, within_s: float) -> bool:
    """The process ended within ``within_s``: no longer there, or a zombie (dead, waiting to be
    reaped by a parent that may be a container's init which never reaps)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (ProcessLookupError, FileNotFoundError):
            return True
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def finish(store: VariantStore, trial: optuna.trial.Trial, value: float | None, status: str = "ok"
           ) -> optuna.trial.FrozenTrial:
    """What an evaluator records for a popped trial (without measuring anything)."""
    v = store.get(trial.user_attrs[Attr.VARIANT])
    for t in v.spec.tunables:
        trial.suggest_int(t.name, t.values[0], t.values[-1])
    trial.set_user_attr(Attr.STATUS, status)
    if value is None:
        return store.study.tell(trial, state=TrialState.FAIL)
    return store.study.tell(trial, value)


def cli(*args: str, timeout: float = 180, pythonpath: list[Path] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVOLVE_LLM_"))}
    env["PYTHONPATH"] = os.pathsep.join(map(str, [*(pythonpath or []), ROOT]))
    return subprocess.run([sys.executable, "-m", "evolve", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def one_line_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("evolve:")]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for n in needles:
        assert n in lines[0], lines[0]


REPLAY = ["backend=replay", "hardware=h200", "search.progress=false", "llm=none"]


def evolve(*overrides: str) -> float | None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*REPLAY, *overrides])
    return run(cfg)


def study(name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage="sqlite:///runs/evolve.db")


def finished(name: str) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study(name).trials if counts_toward_budget(t)]


def write_best(t: Task, folder: Path, tunables: dict[str, int] | None = None, seed: int = 0) -> Path:
    """best.cu, best.json and best.py for one of a task's seeds, as an export writes them."""
    v = t.seeds()[seed]
    cfg = dict(tunables if tunables is not None else v.spec.default)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "best.cu").write_text(v.with_defines(cfg, t.defines))
    (folder / "best.json").write_text(json.dumps({"task_config": dict(t.config), "tunables": cfg}))
    (folder / "best.py").write_text(best_py(t, "test", "a test"))
    return folder / "best.py"


def import_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def check_config(task: dict, hardware: str = "h200", **backend: object) -> dict:
    hw = {"name": "auto"} if hardware == "auto" else yaml.safe_load(
        (CONF_DIR / "hardware" / f"{hardware}.yaml").read_text())
    return {"task": task, "hardware": hw, "backend": {"name": "check", "jobs": 1, **backend}}


def check_lines(task: dict, **kw: object) -> tuple[int, list[str]]:
    """``backend=check`` on a task configuration: its exit code and the lines it printed."""
    lines: list[str] = []
    return check_task(check_config(task, **kw), lines.append), lines
