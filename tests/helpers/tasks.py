"""Shared by the tests: task and hardware configurations, GPU detection."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.artifacts import FileSystemArtifactStore

from evolve.errors import EvolveError
from evolve.paths import CONF_DIR
from evolve.record.variants import VariantStore
from evolve.task.task import Task, builtin_task

OWN = Path(__file__).parents[1] / "own_tasks"


def nvrtc_or_skip() -> None:
    try:
        from evolve.kernel.compiler import nvrtc_version

        nvrtc_version()
    except EvolveError:
        if os.environ.get("EVOLVE_REQUIRE_NVRTC"):
            raise
        pytest.skip("NVRTC not installed (pip install -e '.[test]')")


H200_PROPS = {
    "name": "NVIDIA H200", "major": 9, "minor": 0, "sms": 132, "max_threads_per_block": 1024,
    "max_threads_per_sm": 2048, "max_shared_per_block": 232448, "shared_per_sm": 233472,
    "registers_per_sm": 65536, "l2_bytes": 62914560, "driver": 13000, "pci_bus": 1,
}


TASKS = sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml"))


def task_config(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONF_DIR / "task" / f"{name}.yaml").read_text())


def task(name: str) -> Task:
    return builtin_task(name)


def hardware_config(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONF_DIR / "hardware" / f"{name}.yaml").read_text())


def variant_store(folder: Path, name: str = "t") -> VariantStore:
    """A run's study in a real SQLite file, with its variant store (artifacts in the folder)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=f"sqlite:///{folder}/t.db", load_if_exists=True)
    return VariantStore(study, FileSystemArtifactStore(str(folder)))


@functools.cache
def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


QUICK_TIMING = {"warmup_ms": 1, "warmup_min": 1, "min_samples": 3, "max_samples": 5, "max_time_s": 0.2}
