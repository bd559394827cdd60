"""How a run was called, kept where it can be found again: the configuration as an artifact of the
study, Hydra's record of the invocation in the run's folder, and the command that resumes it."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Any

import optuna
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from evolve.record.storage import redact


def store_config(study: optuna.Study, artifacts: FileSystemArtifactStore, c: dict[str, Any]) -> None:
    """The whole configuration, as an artifact of the study (a password in the storage URL hidden):
    as an attribute, its few kilobytes made `optuna studies` unreadable."""
    storage = dict(c["storage"])
    if storage.get("url"):
        storage["url"] = redact(str(storage["url"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(OmegaConf.to_yaml({**c, "storage": storage}))
        upload_artifact(artifact_store=artifacts, file_path=str(path), study_or_trial=study,
                        mimetype="text/plain", encoding="utf-8")


def keep_invocation(cfg: DictConfig, run_dir: Path) -> None:
    """Hydra's record of how the run was called (``.hydra/config.yaml``, ``overrides.yaml``),
    written once the study has accepted it: a refused resume must not overwrite the record of the
    run it was refused for (Hydra's own copy is switched off: ``hydra.output_subdir: null``)."""
    try:
        overrides = HydraConfig.get().overrides.task
    except ValueError:  # called outside a Hydra app (tests, tools)
        return
    folder = run_dir / ".hydra"
    folder.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, folder / "config.yaml")
    OmegaConf.save(overrides, folder / "overrides.yaml")


def resume_command(name: str, run_dir: str, task: str) -> str:
    """The command that continues exactly this run: its overrides as given (a password in a URL
    hidden), with its task as the user names it (a task file: its path) and its run name (a
    sweep's job: its own name and directory)."""
    given = {o: o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task}
    keep = [f"task={task}" if key == "task" else o for o, key in given.items()
            if key not in ("run.name", "run.dir")]
    if "task" not in given.values():
        keep.insert(0, f"task={task}")
    keep.append(f"run.name={name}")
    if "run.dir" in given.values():
        keep.append(f"run.dir={run_dir}")
    return " ".join(["evolve", *(shlex.quote(redact(o)) for o in keep)])
