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
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from evolve.paths import PACKAGE_DIR, ROOT
from tests.helpers.runs import REPLAY, finished

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVOLVE_LLM_"))},
       "PYTHONPATH": str(ROOT)}


def cli(*args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evolve", *flags, *REPLAY, *args], capture_output=True,
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
    from evolve.evaluate.gpu import worker

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


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """The file or folder cannot be written, not even by root (the tests run as root here, where
    permission bits are ignored): ext4's immutable attribute."""
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root on ext2/3/4, xfs or btrfs)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def _refused(out: subprocess.CompletedProcess[str], needle: str) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("evolve: ") and needle in out.stderr, out.stderr


def test_a_read_only_runs_folder_or_database_is_one_line_and_loses_nothing(in_tmp: Path) -> None:
    assert cli("task=softmax", "run.name=a", "search.n_trials=3").returncode == 0
    runs = in_tmp / "runs"
    with read_only(runs):  # Hydra cannot create the new run's folder, nor a sweep's
        _refused(cli("task=softmax", "run.name=b"), "cannot write the run directory runs/b")
        _refused(cli("task=softmax,sgemm", flags=("-m",)), "cannot write the sweep's folder runs/sweeps/")
    with read_only(runs / "a"):  # nor write its log when resuming
        _refused(cli("task=softmax", "run.name=a", "search.n_trials=5"),
                 "cannot write the run directory runs/a")
    with read_only(runs / "evolve.db"):  # was: 106 lines ending in "invalid data in the commit"
        _refused(cli("task=softmax", "run.name=c"),
                 "cannot write the database runs/evolve.db (attempt to write")
    with read_only(runs / "artifacts"):
        _refused(cli("task=softmax", "run.name=d"), "cannot write the artifact directory runs/artifacts")
    assert optuna.get_all_study_names("sqlite:///runs/evolve.db") == ["a"]
    assert len(finished("a")) == 3


def test_a_read_only_working_directory_is_one_line(in_tmp: Path) -> None:
    here = in_tmp / "here"
    here.mkdir()
    with read_only(here):
        out = subprocess.run([sys.executable, "-m", "evolve", *REPLAY, "task=softmax", "run.name=x"],
                             cwd=here, capture_output=True, text=True, env=ENV, timeout=300)
        _refused(out, "cannot write the run directory runs/x")
