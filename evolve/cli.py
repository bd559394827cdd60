"""The ``evolve`` command: argv, the Hydra app and its sweeps, and one line for every problem a
user can fix. Configuration lives in ``evolve/conf/`` (groups task, hardware, objective, search,
storage, backend); ``evolve.app.run`` assembles one run out of it.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

import hydra
import optuna
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from evolve import version_line
from evolve.app.run import run
from evolve.app.sweep import in_sweep, name_job, record_job
from evolve.errors import EvolveError
from evolve.paths import CONF_DIR
from evolve.settings import RENAMED
from evolve.task.files import list_tasks, register_task_files

log = logging.getLogger("evolve")


def _log_to_file(message: str) -> None:
    """The error that ended the run, in its ``evolve.log`` too (the terminal has it already)."""
    entry = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(entry)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _app(cfg: DictConfig) -> float | None:
    try:
        return _job(cfg)
    finally:
        _drop_unstarted(Path(str(OmegaConf.select(cfg, "run.dir", default=""))))


def _job(cfg: DictConfig) -> float | None:
    try:
        name_job(cfg)
        return run(cfg)
    except (EvolveError, OmegaConfBaseException, OSError, optuna.exceptions.StorageInternalError) as exc:
        message = f"evolve: {_one_line(exc)}"
        _log_to_file(message)
        if not in_sweep():
            _fail(exc)
        # one job's mistake does not stop the sweep: its row in the table says what went wrong; the
        # same mistake in every job (no GPU) is printed once
        print(message if message not in _said else "evolve: (this job: the same)", file=sys.stderr)
        _said.add(message)
        run_dir = Path(str(OmegaConf.select(cfg, "run.dir", default="")))
        record_job(str(OmegaConf.select(cfg, "run.name", default="?")),
                   str(run_dir) if _started(run_dir) else "-", error=message.removeprefix("evolve: "))
        return None


_said: set[str] = set()  # the errors this sweep's jobs printed


def _started(run_dir: Path) -> bool:
    """A run that started has its invocation (``.hydra/``) in its folder."""
    return (run_dir / ".hydra").is_dir()


def _drop_unstarted(run_dir: Path) -> None:
    """A run that never started (a check, a refused command or sweep job, no GPU) leaves no
    folder behind: Hydra made it for the log alone (a sweep's table has the job's error)."""
    if not run_dir.is_dir() or _started(run_dir) or [p.name for p in run_dir.iterdir()] != ["evolve.log"]:
        return
    root, here = logging.getLogger(), run_dir.resolve()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == here:
            handler.close()
            root.removeHandler(handler)
    with contextlib.suppress(OSError):
        (run_dir / "evolve.log").unlink()
        run_dir.rmdir()
        if run_dir.parent.name == "runs":  # the default root, made for this folder alone: empty now
            run_dir.parent.rmdir()


def main() -> None:
    """The ``evolve`` command. Hydra's own errors (an override of a setting that does not exist,
    a value of the wrong type, an unknown option) are one line too: with HYDRA_FULL_ERROR, Hydra
    raises them to us instead of printing them in several lines."""
    if sys.argv[1:] == ["--version"]:  # ours, not Hydra's
        print(version_line())
        return
    if sys.argv[1:2] == ["tasks"]:
        sys.exit(list_tasks(sys.argv[2:]))
    if sys.argv[1:2] == ["check"]:  # `evolve check task=...` reads as what it does: backend=check
        if any(a.startswith("backend=") for a in sys.argv[2:]):
            _fail(EvolveError("evolve check is backend=check: give no other backend"))
        sys.argv[1:] = [*sys.argv[2:], "backend=check"]
    try:
        sys.argv[1:] = register_task_files(sys.argv[1:])
    except EvolveError as exc:
        _fail(exc)
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _app()
    except (HydraException, OmegaConfBaseException) as exc:
        _fail(exc)


def _fail(exc: Exception) -> NoReturn:
    print(f"evolve: {_one_line(exc)}", file=sys.stderr)
    sys.exit(2)


def _one_line(exc: BaseException) -> str:
    """The first line of an error and of its cause (the configuration error behind a Hydra one),
    the options of a group where an unknown one was chosen, and for a key that does not exist the
    setting meant (in a schema) or how to add one (to an open map such as llm.prices); for a
    storage that refused a write, its real reason (not Optuna's guess, "invalid data in the commit")."""
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        return f"the storage refused a write: {str(exc.__cause__).splitlines()[0]}"
    lines = (str(exc).strip() or type(exc).__name__).splitlines()
    parts = [lines[0]]
    if options := getattr(exc, "options", None):
        parts.append("choose one of " + ", ".join(options))
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else None
    if cause is not None:
        parts.append(str(cause).strip().splitlines()[0])
    line = ": ".join(p.rstrip(".") for p in parts)
    typo = cause or exc
    if isinstance(typo, ConfigKeyError | ConfigAttributeError):
        fields = getattr(getattr(typo, "object_type", None), "__dataclass_fields__", None)
        if fields and str(typo.key) in RENAMED and RENAMED[str(typo.key)] in fields:
            line += f" ({typo.key} is now {RENAMED[str(typo.key)]})"
        elif fields and (near := difflib.get_close_matches(str(typo.key), fields)):
            line += f" (did you mean {' or '.join(near)}?)"
        elif not fields and len(lines) > 1 and lines[1].startswith("To append"):
            line += f" ({lines[1].removeprefix('To append to your config use ')} adds it)"
    return line
