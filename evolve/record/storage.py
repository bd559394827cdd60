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
from collections.abc import Mapping
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
from evolve.writable import writable_dir, writable_file

HARDWARE_STUDY = "_evolve_hardware"


def open_storage(cfg: StorageSettings) -> tuple[BaseStorage, FileSystemArtifactStore]:
    artifacts = Path(cfg.artifacts)
    writable_dir(artifacts, "the artifact directory", "; choose another with storage.artifacts=<folder>")
    if cfg.kind == "rdb":
        if not cfg.url:
            raise EvolveError("storage.url is required, e.g. storage.url=postgresql://user@host/db")
        if cfg.url.startswith("sqlite:///"):
            path = Path(cfg.url.removeprefix("sqlite:///"))
            writable_dir(path.parent, "the database's folder", "; choose another with storage.url=sqlite:///<path>")
            _write_ahead_log(path)
            _writable_database(path)
        storage: BaseStorage = _rdb(cfg.url)
    elif cfg.kind == "journal":
        if not cfg.path:
            raise EvolveError("storage.path is required for a journal, e.g. storage.path=runs/evolve.journal")
        path = Path(cfg.path)
        writable_file(path, "the journal", "; choose another with storage.path=<file>")
        storage = JournalStorage(JournalFileBackend(str(path)))
    else:
        raise EvolveError(f"unknown storage kind {cfg.kind!r}: use storage=sqlite, postgres or journal")
    return storage, FileSystemArtifactStore(str(artifacts))


def open_location(where: str) -> BaseStorage:
    """A storage named on a command line, as optuna-dashboard takes it: a URL, or a file (SQLite
    or journal). Never creates one: a name that does not exist is an error."""
    if where.startswith("sqlite:///") and not Path(where.removeprefix("sqlite:///")).is_file():
        raise EvolveError(f"{where}: no such database")
    if "://" in where:
        return _rdb(where)
    path = Path(where)
    if not path.is_file():
        raise EvolveError(f"{where}: no such file (give a storage URL such as sqlite:///runs/evolve.db, "
                          "or a journal file)")
    with open(path, "rb") as f:
        if f.read(16) == b"SQLite format 3\x00":
            return _rdb(f"sqlite:///{path}")
    return JournalStorage(JournalFileBackend(str(path)))


def location(cfg: Mapping[str, Any]) -> str:
    """The storage as optuna-dashboard and ``python -m evolve.bench.throughput`` take it: a URL
    (its password hidden) or a journal file."""
    if cfg.get("kind") == "journal":
        return str(cfg.get("path") or "runs/evolve.journal")
    return redact(str(cfg.get("url") or ""))


def dashboard_command(cfg: Mapping[str, Any]) -> str:
    """The command that shows this storage's studies, with their kernel sources."""
    return f"optuna-dashboard {location(cfg)} --artifact-dir {cfg.get('artifacts') or 'runs/artifacts'}"


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
            raise EvolveError(f"cannot open storage {redact(url)}: {str(exc).splitlines()[0]}") from None
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


def _writable_database(path: Path) -> None:
    """A write transaction can begin (after waiting for another writer, as the run would): else
    one line now, rather than Optuna's "invalid data in the commit" once the run has begun."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=60)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE _evolve_write_check (x)")  # a write, never committed
            conn.rollback()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            return  # busy for a minute: the run's own writes wait their turn
        raise EvolveError(f"cannot write the database {path} ({exc}); make it writable, or choose another "
                          "with storage.url=sqlite:///<path>") from None


def _sync_at_checkpoints(conn: Any, _record: Any) -> None:
    """Each connection syncs at WAL checkpoints rather than at every commit: a trial writes a
    dozen attributes, and a synced commit each took ~40% of the storage's time per candidate. A
    crash of the process loses nothing; a power cut can lose the last trials, which a resumed
    run measures again."""
    cursor = conn.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def redact(url: str) -> str:
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
