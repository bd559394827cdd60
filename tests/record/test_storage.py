"""Every storage kind holds a run and resumes it: SQLite, a real PostgreSQL server, the journal."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from evolve.errors import EvolveError
from evolve.record.schema import counts_toward_budget
from evolve.record.storage import cached_ceilings, open_storage, store_ceilings
from evolve.settings import StorageSettings
from tests.helpers.runs import evolve


def _finished(storage: optuna.storages.BaseStorage, name: str) -> int:
    study = optuna.load_study(study_name=name, storage=storage)
    return sum(counts_toward_budget(t) for t in study.trials)


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "journal"])
def test_run_and_resume_on_each_storage(in_tmp: Path, kind: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("postgres_url") if kind == "postgres" else ""
    extra = [f"storage.url='{url}'"] if url else []
    name = f"st-{kind}"
    evolve("task=softmax", f"run.name={name}", "search.n_trials=3", f"storage={kind}", *extra)
    evolve("task=softmax", f"run.name={name}", "search.n_trials=6", f"storage={kind}", *extra)
    cfg = {"sqlite": StorageSettings(kind="rdb", url="sqlite:///runs/evolve.db"),
           "journal": StorageSettings(kind="journal", path="runs/evolve.journal"),
           "postgres": StorageSettings(kind="rdb", url=url)}[kind]
    storage, _ = open_storage(cfg)
    assert _finished(storage, name) == 6
    assert (in_tmp / "runs" / name / "best.cu").is_file()


def test_ceiling_cache_round_trip(in_tmp: Path) -> None:
    storage, _ = open_storage(StorageSettings(kind="rdb", url="sqlite:///runs/x.db", artifacts="runs/a"))
    key = "NVIDIA H200|driver 13000"
    assert cached_ceilings(storage, key) is None
    measured = {"copy_bandwidth_bps": 4.25e12, "read_bandwidth_bps": 4.4e12}
    store_ceilings(storage, key, measured)
    assert cached_ceilings(storage, key) == measured
    assert cached_ceilings(storage, "NVIDIA L4|driver 13000") is None


def test_unknown_storage_kind_is_a_clear_error(in_tmp: Path) -> None:
    with pytest.raises(EvolveError, match="unknown storage kind"):
        open_storage(StorageSettings(kind="redis"))


def test_sqlite_storage_writes_ahead_and_syncs_at_checkpoints(in_tmp: Path) -> None:
    """Every connection the storage opens, also after the first ones, is in WAL mode with
    normal sync, and what it wrote is there for a fresh reader."""
    import sqlite3

    storage, _ = open_storage(StorageSettings(kind="rdb", url="sqlite:///runs/w.db"))
    study = optuna.create_study(study_name="w", storage=storage)
    study.enqueue_trial({"x": 1})
    with storage.engine.connect() as conn:  # type: ignore[attr-defined]
        modes = [conn.exec_driver_sql(f"PRAGMA {p}").scalar() for p in ("journal_mode", "synchronous")]
    assert modes == ["wal", 1]  # synchronous NORMAL
    with sqlite3.connect("runs/w.db") as reader:
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # kept by the file
        assert reader.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 1


def _open_and_create(url: str, name: str) -> None:
    storage, _ = open_storage(StorageSettings(kind="rdb", url=url))
    optuna.create_study(study_name=name, storage=storage)


def test_processes_creating_one_sqlite_database_at_once_all_get_it(in_tmp: Path) -> None:
    """Several processes (runs of a sweep, a dashboard) opening one new database at the same
    moment race to create its schema; each of them gets a working storage."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    for r in range(4):
        url = f"sqlite:///runs/race{r}.db"
        procs = [ctx.Process(target=_open_and_create, args=(url, f"s{i}")) for i in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0] * 4, f"round {r}"
        storage, _ = open_storage(StorageSettings(kind="rdb", url=url))
        names = {s.study_name for s in optuna.study.get_all_study_summaries(storage)}
        assert names == {f"s{i}" for i in range(4)}


def test_a_password_is_hidden_in_a_url_and_in_an_override_that_holds_one() -> None:
    from evolve.record.storage import redact

    assert redact("postgresql://u:hunter2@db/evolve") == "postgresql://u:***@db/evolve"
    assert redact("storage.url=postgresql://u:hunter2@db/x") == "storage.url=postgresql://u:***@db/x"
    assert redact("storage.url=postgresql://u@db/x") == "storage.url=postgresql://u@db/x"
    assert redact("search.n_trials=20") == "search.n_trials=20"
