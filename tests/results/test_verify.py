"""Step 5: held-out sizes, and export choosing the first candidate that passed re-verification."""

import json
from pathlib import Path

import optuna
import pytest

from evolve.evaluate.objective import Objective
from evolve.hardware import named
from evolve.record.storage import open_storage
from evolve.record.variants import VariantStore
from evolve.results.export import export
from evolve.results.verify import Verification, holdout_sizes
from evolve.settings import StorageSettings
from evolve.task.task import load_task, size_label
from tests.helpers.runs import evolve
from tests.helpers.tasks import hardware_config, task, task_config


def test_holdout_sizes_are_new_and_awkward() -> None:
    t = task("softmax")
    held = holdout_sizes(t)
    checked = {size_label(s) for s in t.correctness_sizes}
    assert held and all(size_label(s) not in checked for s in held)
    assert {"rows": 2, "cols": 2} in held
    cfg = task_config("softmax")
    cfg["sizes"]["holdout"] = [{"rows": 5, "cols": 77}]
    assert holdout_sizes(load_task(cfg)) == [{"rows": 5, "cols": 77}]


def _replay_run(name: str) -> tuple[optuna.Study, VariantStore]:
    evolve("task=transpose", f"run.name={name}", "search.n_trials=8", "search.seed=2")
    storage, artifacts = open_storage(StorageSettings(kind="rdb", url="sqlite:///runs/evolve.db",
                                                      artifacts="runs/artifacts"))
    study = optuna.load_study(study_name=name, storage=storage)
    variants = VariantStore(study, artifacts)
    variants.load()
    return study, variants


def test_export_takes_the_first_candidate_that_passed(in_tmp: Path) -> None:
    study, variants = _replay_run("v1")
    ranked = sorted((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    checks = [
        Verification(ranked[0].number, "wrong", "y: 3 of 6 elements outside tolerance", None, ranked[0].value,
                     ["rows=2,cols=2"]),
        Verification(ranked[1].number, "ok", "", ranked[1].value * 1.01, ranked[1].value, ["rows=2,cols=2"],
                     iqr_ms=0.006 * ranked[1].value, recorded_iqr_ms=0.005 * ranked[1].value),
    ]
    hw = named({**hardware_config("h200")})
    summary = export(study, variants, task("transpose"), hw, Objective("latency", "first"),
                     Path("runs/v1"), "budget", checks)
    # the re-measured time is the one exported; the search's is kept beside it
    assert summary is not None and summary.best_ms == ranked[1].value * 1.01
    assert "the search measured" in summary.verified and "within the IQRs" in summary.verified
    out = json.loads(Path("runs/v1/best.json").read_text())
    assert out["time_ms"] == ranked[1].value * 1.01 and out["search_ms"] == ranked[1].value
    assert out["verification"][0]["status"] == "wrong"
    assert out["verification"][1]["reproduced"] is True
    assert "Re-verification of the winner" in Path("runs/v1/report.md").read_text()


def test_a_search_time_the_re_measurement_does_not_reproduce_is_not_exported(in_tmp: Path) -> None:
    study, variants = _replay_run("v3")
    best = min((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    again = best.value * 1.08  # an optimistic search time, 8% off: far outside the IQRs
    checks = [Verification(best.number, "ok", "", again, best.value, ["n=2"], iqr_ms=0.001,
                           recorded_iqr_ms=0.001)]
    hw = named(hardware_config("h200"))
    summary = export(study, variants, task("transpose"), hw, Objective("latency", "first"), Path("runs/v3"),
                     "budget", checks)
    assert summary is not None and summary.best_ms == again and "NOT REPRODUCED" in summary.line()
    gbps = float(summary.headline.split(" GB/s")[0])
    assert gbps == pytest.approx(best.user_attrs["gbps"] / 1.08, rel=1e-3)  # figures of the reported time
    assert json.loads(Path("runs/v3/best.json").read_text())["time_ms"] == again


def test_nothing_is_exported_when_no_candidate_passes(in_tmp: Path) -> None:
    study, variants = _replay_run("v2")
    best = min((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    checks = [Verification(best.number, "wrong", "wrote out of bounds of out", None, best.value, ["n=2"])]
    hw = named(hardware_config("h200"))
    assert export(study, variants, task("transpose"), hw, Objective("latency", "first"), Path("runs/v2"),
                  "budget", checks) is None
    assert not Path("runs/v2/best.cu").exists()
    assert "No candidate passed re-verification" in Path("runs/v2/report.md").read_text()


def test_a_time_is_reproduced_only_within_the_two_iqrs() -> None:
    def check(again: float, iqr: float, recorded_iqr: float) -> bool:
        v = Verification(0, "ok", "", again, 1.0, ["n=2"], iqr_ms=iqr, recorded_iqr_ms=recorded_iqr)
        return v.reproduced

    assert check(1.009, 0.005, 0.005)
    assert not check(1.011, 0.005, 0.005)  # within the old 10% rule, outside the IQRs
    assert not check(0.95, 0.01, 0.01)
    assert not Verification(0, "wrong", "x", None, 1.0, ["n=2"]).reproduced
