"""Where a run writes (its directory, the sweep's folder, the database, the artifacts) must be
writable, and where it is not, the run is refused at once in one line: not a traceback from
Hydra creating its log, nor Optuna's "invalid data in the commit" after the run has begun."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from evolve.errors import EvolveError


def writable_dir(path: Path, what: str, hint: str = "") -> None:
    """Create ``path`` if needed and write a file in it; else raise, naming ``what`` it is."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise EvolveError(f"cannot write {what} {path} ({exc.strerror or exc}){hint}") from None


def writable_file(path: Path, what: str, hint: str = "") -> None:
    """An existing file must open for appending (a new one, its folder must take it)."""
    if not path.exists():
        writable_dir(path.parent, f"the folder of {what}", hint)
        return
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise EvolveError(f"cannot write {what} {path} ({exc.strerror or exc}){hint}") from None


class WritableOutput(Callback):
    """Before Hydra creates a run's (or a sweep's) folder and log: can it?"""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check(Path(str(config.hydra.run.dir)), "the run directory", "run.dir=<folder>")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check(Path(str(config.hydra.sweep.dir)), "the sweep's folder", "hydra.sweep.dir=<folder>")


def _check(path: Path, what: str, choice: str) -> None:
    try:
        writable_dir(path, what, f"; run where you can write, or choose {choice}")
    except EvolveError as exc:
        print(f"evolve: {exc}", file=sys.stderr)
        sys.exit(2)
