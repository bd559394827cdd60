"""Shared fixtures: task configs, GPU detection, and a private PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.llm import KEY
from tests.helpers.tasks import gpu_available

# The GPU suite in two halves, each well inside the GPU machine's 10 minutes a command
# (pytest -m gpu --gpu-half=1, then --gpu-half=2): the files of the first half.
GPU_HALF_1 = {"test_adversarial.py", "test_gpu.py", "test_bench.py", "test_gpu_l2.py"}
GPU_TEST_TIMEOUT_S = 300  # a hang is one test's failure, not the whole run's
# timing settings for GPU tests that judge correctness, not speed (timed calls are still checked)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpu-half", type=int, choices=(1, 2), default=None,
                     help="run one half of the GPU tests (with -m gpu): 1 or 2")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (run pytest -m gpu on the GPU machine)")
    half = config.getoption("--gpu-half")
    kept = []
    for item in items:
        if "gpu" in item.keywords:
            if half is not None and (item.path.name in GPU_HALF_1) != (half == 1):
                continue
            if not gpu_available():
                item.add_marker(skip)
            elif item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(GPU_TEST_TIMEOUT_S))
        kept.append(item)
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory, so runs/ and its database are private to the test."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A private PostgreSQL server on a Unix socket, started from the Debian packages' binaries.

    Skips where PostgreSQL is not installed, unless EVOLVE_REQUIRE_POSTGRES is set (CI sets it):
    then a missing server is a failure, not a skip.
    """
    bindirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not bindirs:
        if os.environ.get("EVOLVE_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL is required (EVOLVE_REQUIRE_POSTGRES) but not installed")
        pytest.skip("PostgreSQL server binaries not installed")
    bindir = bindirs[-1]
    base = Path(tempfile.mkdtemp(prefix="evolve-pg-"))  # not under pytest's root-only tmp
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    port = "54329"
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, capture_output=True)
    subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(base / "log"),
                    "-o", f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@/postgres?host={sock}&port={port}"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
