"""Shared fixtures: task configs, GPU detection, and a private PostgreSQL server."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from evolve.paths import CONF_DIR
from evolve.task import Task, load_task

TASKS = sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml"))


def task_config(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONF_DIR / "task" / f"{name}.yaml").read_text())


def task(name: str) -> Task:
    return load_task(task_config(name))


def hardware_config(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONF_DIR / "hardware" / f"{name}.yaml").read_text())


@functools.cache
def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (run pytest -m gpu on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords and not gpu_available():
            item.add_marker(skip)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory, so runs/ and its database are private to the test."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
