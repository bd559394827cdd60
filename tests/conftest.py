"""Shared fixtures: task configs, GPU detection, and a private PostgreSQL server."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.helpers.llm import KEY
from tests.helpers.tasks import gpu_available

GPU_TEST_TIMEOUT_S = 300  # a hang is one test's failure, not the whole run's


def gpu_part(text: str) -> tuple[int, int]:
    """``K/N``: the K-th of N parts of the GPU tests, so each part of a long suite fits a
    machine whose commands are cut at 10 minutes."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N (e.g. 1/3)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be 1 to N")
    return k, n


def part_of(index: int, count: int, part: tuple[int, int]) -> bool:
    """Whether the index-th of count GPU tests (in collection order) is in ``part``: N contiguous
    runs of near-equal length, so a file's tests stay together."""
    k, n = part
    return (k - 1) * count // n <= index < k * count // n


NO_GPU = "needs an NVIDIA GPU with CuPy (run pytest -m gpu on the GPU machine)"
NOT_ALONE = "a timing test wants the GPU to itself: run pytest -m 'gpu and timing' without -n"


def why_skipped(markers: Iterable[str], gpu: bool, worker: str | None) -> str | None:
    """Why a GPU test cannot run here, or None. Under pytest-xdist (``worker`` set) several tests
    share one GPU: a test marked ``timing`` asserts a speed or a host time and would measure the
    others' kernels and compiles too, so it runs only in a process of its own."""
    if not gpu:
        return NO_GPU
    if worker is not None and "timing" in markers:
        return NOT_ALONE
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpu-part", type=gpu_part, default=None, metavar="K/N",
                     help="run the K-th of N parts of the GPU tests (with -m gpu), e.g. 1/3")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("--gpu-part")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    gpu = [item for item in items if "gpu" in item.keywords]
    dropped = {id(item) for i, item in enumerate(gpu) if part is not None and not part_of(i, len(gpu), part)}
    for item in gpu:
        if reason := why_skipped(item.keywords, gpu_available(), worker):
            item.add_marker(pytest.mark.skip(reason=reason))
        elif item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(GPU_TEST_TIMEOUT_S))
    if dropped:
        config.hook.pytest_deselected(items=[i for i in items if id(i) in dropped])
        items[:] = [i for i in items if id(i) not in dropped]


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
