"""Optuna storage and artifact store from the ``storage`` config group.

SQLite is the default for one process; PostgreSQL (RDB) for many processes or machines; the
journal file for one node without a database. Kernel sources go to the artifact store, never
into attributes (MySQL caps those at 64 KiB).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from sqlalchemy import event

from evolve.errors import EvolveError
from evolve.hardware import MEASURED

HARDWARE_STUDY = "_evolve_hardware"


def open_storage(cfg: Mapping[str, Any]) -> tuple[BaseStorage, FileSystemArtifactStore]:
    kind = cfg.get("kind")
    artifacts = Path(str(cfg.get("artifacts") or "runs/artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    if kind == "rdb":
        url = cfg.get("url")
        if not url:
            raise EvolveError("storage.url is required, e.g. storage.url=postgresql://user@host/db")
        url = str(url)
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            storage: BaseStorage = RDBStorage(url, engine_kwargs=_engine_kwargs(url))
        except Exception as exc:  # SQLAlchemy/driver errors: unreachable host, bad URL, ...
            raise EvolveError(f"cannot open storage {_redact(url)}: {str(exc).splitlines()[0]}") from None
        if url.startswith("sqlite"):
            _write_ahead_log(storage)
    elif kind == "journal":
        path = Path(str(cfg.get("path") or "runs/evolve.journal"))
        path.parent.mkdir(parents=True, exist_ok=True)
        storage = JournalStorage(JournalFileBackend(str(path)))
    else:
        raise EvolveError(f"unknown storage kind {kind!r}: use storage=sqlite, postgres or journal")
    return storage, FileSystemArtifactStore(str(artifacts))


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    return {"pool_pre_ping": True}


def _write_ahead_log(storage: RDBStorage) -> None:
    """SQLite in WAL mode, synced at checkpoints rather than at every commit: a trial writes a
    dozen attributes, and a synced commit each took ~40% of the storage's time per candidate. A
    crash of the process loses nothing; a power cut can lose the last trials, which a resumed
    run measures again. Readers (optuna-dashboard) no longer block the writer."""

    @event.listens_for(storage.engine, "connect")
    def _pragmas(conn: Any, _record: Any) -> None:
        cursor = conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    storage.engine.dispose()  # connections opened before the listener reconnect with it


def _redact(url: str) -> str:
    """A URL without its password, for messages."""
    head, sep, tail = url.partition("@")
    if not sep or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, cred = head.partition("//")
    return f"{scheme}//{cred.split(':', 1)[0]}:***@{tail}"


def cached_ceilings(storage: BaseStorage, key: str) -> dict[str, float] | None:
    """The bandwidths measured on this device earlier, if every one of them is there."""
    try:
        study = optuna.load_study(study_name=HARDWARE_STUDY, storage=storage)
    except KeyError:
        return None
    entry = study.user_attrs.get(key) or {}
    if not all(k in entry for k in MEASURED):
        return None
    return {k: float(entry[k]) for k in MEASURED}


def store_ceilings(storage: BaseStorage, key: str, ceilings: dict[str, float]) -> None:
    study = optuna.create_study(study_name=HARDWARE_STUDY, storage=storage, load_if_exists=True)
    study.set_user_attr("about", "cuda-evolve's cache of measured bandwidth ceilings, one per device")
    study.set_user_attr(key, {**ceilings, "date": dt.date.today().isoformat()})
