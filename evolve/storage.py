"""Optuna storage and artifact store from the ``storage`` config group.

SQLite is the default for one process; PostgreSQL (RDB) for many processes or machines; the
journal file for one node without a database. Kernel sources go to the artifact store, never
into attributes (MySQL caps those at 64 KiB).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, OperationalError

from evolve.errors import EvolveError
from evolve.hardware import MEASURED
from evolve.settings import StorageSettings

HARDWARE_STUDY = "_evolve_hardware"


def open_storage(cfg: StorageSettings) -> tuple[BaseStorage, FileSystemArtifactStore]:
    artifacts = Path(cfg.artifacts)
    artifacts.mkdir(parents=True, exist_ok=True)
    if cfg.kind == "rdb":
        if not cfg.url:
            raise EvolveError("storage.url is required, e.g. storage.url=postgresql://user@host/db")
        if cfg.url.startswith("sqlite:///"):
            path = Path(cfg.url.removeprefix("sqlite:///"))
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_ahead_log(path)
        storage: BaseStorage = _rdb(cfg.url)
    elif cfg.kind == "journal":
        if not cfg.path:
            raise EvolveError("storage.path is required for a journal, e.g. storage.path=runs/evolve.journal")
        path = Path(cfg.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        storage = JournalStorage(JournalFileBackend(str(path)))
    else:
        raise EvolveError(f"unknown storage kind {cfg.kind!r}: use storage=sqlite, postgres or journal")
    return storage, FileSystemArtifactStore(str(artifacts))


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    return {"pool_pre_ping": True}


def _rdb(url: str) -> RDBStorage:
    """Optuna's storage; when another process (a second run, optuna-dashboard) creates the same
    new database at the same moment, one of the two loses the race to write its schema version:
    it tries again and finds the schema there."""
    for attempt in range(3):
        try:
            storage = RDBStorage(url, engine_kwargs=_engine_kwargs(url))
            break
        except Exception as exc:  # SQLAlchemy/driver errors: unreachable host, bad URL, ...
            if attempt < 2 and _lost_creation_race(exc):
                time.sleep(0.5)
                continue
            raise EvolveError(f"cannot open storage {_redact(url)}: {str(exc).splitlines()[0]}") from None
    if url.startswith("sqlite"):
        event.listen(storage.engine, "connect", _sync_at_checkpoints)
        storage.engine.dispose()  # connections opened before the listener reconnect with it
    return storage


def close_storage(storage: BaseStorage) -> None:
    """Leave the storage complete in its own file: an SQLite database's write-ahead log is folded
    back into it, so that copying the one file (to another machine, say) copies the whole record."""
    if not isinstance(storage, RDBStorage):
        return
    storage.engine.dispose()
    path = storage.engine.url.database
    if storage.engine.dialect.name == "sqlite" and path and path != ":memory:":
        with contextlib.suppress(sqlite3.OperationalError), contextlib.closing(
                sqlite3.connect(path, timeout=60)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _lost_creation_race(exc: Exception) -> bool:
    """Another process wrote the table or the schema version first."""
    return isinstance(exc, IntegrityError) or (
        isinstance(exc, OperationalError) and "already exists" in str(exc))


def _write_ahead_log(path: Path) -> None:
    """SQLite in WAL mode (a property of the file, set before Optuna opens it): readers such as
    optuna-dashboard no longer hold up the run's writes. Left as it is if another process has
    the file open in the old mode."""
    with contextlib.suppress(sqlite3.OperationalError), contextlib.closing(
            sqlite3.connect(path, timeout=60)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def _sync_at_checkpoints(conn: Any, _record: Any) -> None:
    """Each connection syncs at WAL checkpoints rather than at every commit: a trial writes a
    dozen attributes, and a synced commit each took ~40% of the storage's time per candidate. A
    crash of the process loses nothing; a power cut can lose the last trials, which a resumed
    run measures again."""
    cursor = conn.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


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
