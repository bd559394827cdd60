"""Faults the run must survive or explain: a locked database, a full disk at export time, and the
rule that generated text never reaches a shell or an interpreter."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import sqlalchemy
from test_search import REPLAY, finished

from evolve.paths import PACKAGE_DIR, ROOT

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVOLVE_LLM_"))},
       "PYTHONPATH": str(ROOT)}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evolve", *REPLAY, *args], capture_output=True,
                          text=True, env=ENV, timeout=300)


def test_a_locked_database_is_waited_for(in_tmp: Path) -> None:
    assert cli("task=softmax", "run.name=l", "search.n_trials=2").returncode == 0
    holder = sqlite3.connect("runs/evolve.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the database

    def release() -> None:
        time.sleep(3)
        holder.execute("COMMIT")

    threading.Thread(target=release).start()
    t0 = time.monotonic()
    out = cli("task=softmax", "run.name=l", "search.n_trials=5")
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 >= 3
    assert len(finished("l")) == 5


def test_a_full_disk_at_export_is_one_clear_line_and_the_study_survives(in_tmp: Path) -> None:
    assert cli("task=transpose", "run.name=full", "search.n_trials=4").returncode == 0
    report = Path("runs/full/report.md")
    report.unlink()
    report.symlink_to("/dev/full")  # every write to it fails with ENOSPC
    out = cli("task=transpose", "run.name=full", "search.n_trials=6")
    assert out.returncode == 2
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("evolve:")]
    assert len(line) == 1 and "No space left on device" in line[0] and "study is intact" in line[0]
    assert len(finished("full")) == 6  # the measurements are in the storage
    report.unlink()
    assert cli("task=transpose", "run.name=full", "search.n_trials=6").returncode == 0  # export again
    assert "| variant |" in report.read_text()


def test_no_code_path_can_run_generated_text_on_the_host() -> None:
    """A guard against regressions: the package never evaluates or shells out text."""
    banned = re.compile(
        r"(?<![.\w])(eval|exec|compile)\(|os\.system|os\.popen|shell\s*=\s*True|pickle\.loads"
    )
    for path in PACKAGE_DIR.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            assert not banned.search(code), f"{path.relative_to(ROOT)}:{n}: {line.strip()}"


def test_the_worker_sees_no_llm_keys() -> None:
    """Keys live only in the search process; the GPU worker is spawned without them."""
    from evolve.backends import worker

    for name in ("OPENAI_API_KEY", "EVOLVE_POSTGRES_URL", "MY_PROVIDER_KEY", "HF_TOKEN", "PGPASSWORD"):
        assert worker._secret(name), name
    assert not worker._secret("CUDA_VISIBLE_DEVICES") and not worker._secret("PATH")


def test_a_study_survives_optuna_reading_it_while_a_run_writes(in_tmp: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "evolve", *REPLAY, "task=softmax", "run.name=r",
                             "search.n_trials=10", "backend.delay_s=0.1"], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reads = 0
    while proc.poll() is None:
        with contextlib.suppress(KeyError, sqlalchemy.exc.OperationalError):  # not created yet
            reads += len(optuna.load_study(study_name="r", storage="sqlite:///runs/evolve.db").trials) >= 0
        time.sleep(0.05)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert reads > 5 and len(finished("r")) == 10
