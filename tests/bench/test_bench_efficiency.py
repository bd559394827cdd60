"""Search efficiency on recorded spaces: real recordings, real samplers, real Kernel Tuner (simulation)."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from evolve.bench.efficiency import (
    OURS,
    THEIRS,
    RecordedSpace,
    best_curve,
    compare,
    evals_to_reach,
    plot,
    run_kernel_tuner,
    run_ours,
    summarize,
    table,
)
from evolve.errors import EvolveError
from evolve.evaluate.recording import builtin_path

pytest.importorskip("kernel_tuner")


@pytest.fixture(scope="module")
def sgemm() -> RecordedSpace:
    return RecordedSpace.load("h200", "sgemm", "vectorized")


@pytest.fixture(scope="module")
def softmax() -> RecordedSpace:
    return RecordedSpace.load("h200", "softmax", "block_row")


def test_a_space_holds_every_valid_configuration_and_the_recordings_optimum(sgemm: RecordedSpace) -> None:
    valid = sgemm.spec.space()
    assert sgemm.size == len(valid) > 400
    assert set(sgemm.times) == {tuple(c[n] for n in sgemm.names) for c in valid}
    lines = [json.loads(x) for x in builtin_path("h200", "sgemm").read_text().splitlines() if x.strip()]
    ms = [x["measurement"]["timings"]["M=4096,N=4096,K=4096"]["median_s"] * 1e3 for x in lines
          if x["kind"] == "measurement" and x["name"] == "vectorized" and x["measurement"]["status"] == "ok"]
    assert sgemm.optimum == pytest.approx(min(ms), rel=1e-12)


def test_unknown_variant_or_task_is_refused() -> None:
    with pytest.raises(EvolveError, match=r"no variant 'nope'.*vectorized"):
        RecordedSpace.load("h200", "sgemm", "nope")
    with pytest.raises(EvolveError, match="unknown task"):
        RecordedSpace.load("h200", "no_such_task", "x")


def test_a_space_the_recording_does_not_cover_is_refused() -> None:
    with pytest.raises(EvolveError, match=r"has 0 of the \d+ configurations"):
        RecordedSpace.load("a100", "sgemm", "vectorized")


def test_best_curve_and_evals_to_reach_on_a_hand_made_run() -> None:
    values = [None, 2.0, 4.0, 1.04, 1.0]
    assert best_curve(values, 1.0, 7).tolist() == pytest.approx([0, 0.5, 0.5, 1 / 1.04, 1, 1, 1])
    assert best_curve(values, 1.0, 3).tolist() == [0, 0.5, 0.5]
    assert best_curve([], 1.0, 2).tolist() == [0, 0]
    assert evals_to_reach(values, 1.0) == 4
    assert evals_to_reach(values, 1.0, fraction=1.0) == 5
    assert evals_to_reach([None, 2.0], 1.0) is None
    s = summarize([values, [None, 2.0], [1.0]], 1.0, budget=4)
    assert s["median_evals_to_95"] == 4 and s["reached"] == pytest.approx(2 / 3)  # median of 4, 5 (never), 1
    assert s["mean"] == pytest.approx([1 / 3, 2 / 3, 2 / 3, (1 / 1.04 + 0.5 + 1) / 3])
    assert all(lo <= mu <= hi for lo, mu, hi in zip(s["low"], s["mean"], s["high"], strict=True))
    assert s["low"][0] < s["mean"][0] < s["high"][0]  # the seeds disagree, so the band has width


@pytest.mark.parametrize("strategy", ["brute_force", "random_sample"])
def test_kernel_tuner_with_the_whole_space_as_budget_sees_every_configuration_once(
        sgemm: RecordedSpace, strategy: str, tmp_path: Path) -> None:
    values = run_kernel_tuner(sgemm, strategy, sgemm.size, 0, tmp_path)
    assert Counter(values) == Counter(sgemm.times.values())
    assert best_curve(values, sgemm.optimum, sgemm.size)[-1] == 1.0


def test_our_bruteforce_with_the_whole_space_as_budget_sees_every_configuration_once(
        softmax: RecordedSpace) -> None:
    values = run_ours(softmax, "bruteforce", softmax.size + 5, 0)
    assert Counter(values) == Counter(softmax.times.values())
    assert best_curve(values, softmax.optimum, softmax.size + 5)[-1] == 1.0


@pytest.mark.parametrize("space", ["softmax/block_row", "transpose/tiled", "softmax/naive"])
def test_every_default_method_runs_on_a_small_space(space: str, tmp_path: Path) -> None:
    """Kernel Tuner's default populations (bayes_opt, diff_evo) are larger than these spaces."""
    s = RecordedSpace.load("h200", *space.split("/"))
    runs = [run_kernel_tuner(s, strategy, 100, 0, tmp_path) for strategy in THEIRS]
    runs += [run_ours(s, sampler, 100, 0) for sampler in OURS if sampler != "gp"]  # gp needs torch
    for values in runs:
        assert values and Counter(values) <= Counter(s.times.values())


def test_ours_never_repeats_nor_leaves_the_valid_space(sgemm: RecordedSpace) -> None:
    for sampler in ("cmaes", "qmc"):  # CMA-ES keeps proposing what it has seen; QMC lands on invalid ones
        values = run_ours(sgemm, sampler, 60, 1)
        assert len(values) == 60 and not Counter(values) - Counter(sgemm.times.values())


def test_curves_are_monotone_and_bounded(sgemm: RecordedSpace, tmp_path: Path) -> None:
    runs = [run_ours(sgemm, "random", 50, 2), run_kernel_tuner(sgemm, "genetic_algorithm", 50, 2, tmp_path)]
    for values in runs:
        curve = best_curve(values, sgemm.optimum, 80)
        assert len(curve) == 80 and np.all(np.diff(curve) >= 0) and 0 < curve[-1] <= 1
        assert not Counter(values) - Counter(sgemm.times.values())


def test_the_same_seed_replays_the_same_search(sgemm: RecordedSpace, softmax: RecordedSpace,
                                               tmp_path: Path) -> None:
    assert run_ours(softmax, "tpe", 10, 3) == run_ours(softmax, "tpe", 10, 3)
    assert run_ours(sgemm, "random", 30, 3) != run_ours(sgemm, "random", 30, 4)
    # bayes_opt and diff_evo draw a Latin hypercube, which our seed now reaches. Past its first 20
    # (that sample), bayes_opt still differs now and then between runs of one seed, even with one
    # BLAS thread; the cause is inside Kernel Tuner and not found, so only its sample is compared.
    for strategy, n in (("genetic_algorithm", 40), ("diff_evo", 40), ("bayes_opt", 20)):
        first = run_kernel_tuner(sgemm, strategy, 40, 3, tmp_path)[:n]
        assert first == run_kernel_tuner(sgemm, strategy, 40, 3, tmp_path)[:n], strategy
        assert first != run_kernel_tuner(sgemm, strategy, 40, 4, tmp_path)[:n], strategy


def test_compare_writes_a_table_and_a_plot_with_every_method(softmax: RecordedSpace, tmp_path: Path) -> None:
    r = compare(softmax, ["random", "tpe"], ["random_sample", "genetic_algorithm", "no_such_strategy"],
                budget=8, seeds=3, workdir=tmp_path / "kt", jobs=2)
    results = json.loads(json.dumps({softmax.label: r}))
    assert r["size"] == softmax.size and r["optimum_ms"] == softmax.optimum
    assert "error" in r["methods"]["kernel_tuner:no_such_strategy"]
    good = {k: m for k, m in r["methods"].items() if "error" not in m}
    assert set(good) == {"cuda-evolve:random", "cuda-evolve:tpe", "kernel_tuner:random_sample",
                         "kernel_tuner:genetic_algorithm"}
    for m in good.values():
        assert len(m["mean"]) == 8
        assert all(lo <= mu <= hi for lo, mu, hi in zip(m["low"], m["mean"], m["high"], strict=True))
        assert 0 <= m["reached"] <= 1 and m["wall_s"] > 0
    md = table(results)
    assert all(f"| {name} |" in md for name in r["methods"]) and "failed: ValueError" in md
    png = plot(results | {"again": results[softmax.label]}, tmp_path / "efficiency.png")  # two panels
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ours_measures_the_default_first_as_a_run_does(sgemm: RecordedSpace) -> None:
    for climb in (True, False):
        values = run_ours(sgemm, "tpe", 5, 0, climb)
        assert values[0] == sgemm.times[sgemm.key(sgemm.spec.default)] and len(values) == 5
