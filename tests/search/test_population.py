"""Islands, elitism, the noise rule and migration, fed with real FrozenTrials."""

import random

import optuna
from optuna.trial import TrialState

from evolve.search.population import Population


def trial(number: int, vid: str, ms: float | None, iqr: float = 0.01) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(
        value=ms, state=TrialState.COMPLETE if ms is not None else TrialState.FAIL,
        user_attrs={"variant": vid, "iqr_ms": iqr},
    )
    t.number = number
    return t


def pop(capacity: int = 3, islands: int = 2, migrate_every: int = 0) -> Population:
    return Population(islands, capacity, elite=1, migrate_every=migrate_every, novelty=0.3,
                      source=lambda vid: f"extern \"C\" __global__ void k_{vid}() {{ int {vid} = 1; }}")


def test_members_join_until_full_then_only_beyond_the_noise() -> None:
    p = pop(capacity=3)
    for i, (vid, ms) in enumerate([("a", 1.0), ("b", 2.0), ("c", 3.0)]):
        p.observe(trial(i, vid, ms), island=0)
    assert sorted(p.islands[0]) == ["a", "b", "c"]
    p.observe(trial(3, "d", 2.95, iqr=0.05), island=0)  # faster than c, but within 2*(0.05+0.01)
    assert "d" not in p.islands[0]
    p.observe(trial(4, "e", 2.5), island=0)  # beyond the noise: replaces the worst
    assert sorted(p.islands[0]) == ["a", "b", "e"]
    p.observe(trial(5, "f", None), island=0)  # a failure never joins
    assert "f" not in p.members and p.observed == 6
    assert p.best().vid == "a"


def test_the_elite_is_never_displaced() -> None:
    p = Population(1, 1, elite=1, migrate_every=0, novelty=0.0, source=lambda v: v)
    p.observe(trial(0, "a", 5.0), island=0)
    p.observe(trial(1, "b", 1.0), island=0)
    assert p.islands[0] == ["a"]


def test_a_variant_improved_by_tuning_can_join_later() -> None:
    p = pop(capacity=1)
    p.observe(trial(0, "a", 1.0), island=0)
    p.observe(trial(1, "b", 2.0), island=0)
    p.elite = 0
    p.observe(trial(2, "b", 0.5), island=0)
    assert p.islands[0] == ["b"] and p.members["b"].best_ms == 0.5 and p.members["b"].n_ok == 2


def test_migration_copies_each_islands_best_to_the_next() -> None:
    p = pop(capacity=3, islands=2, migrate_every=4)
    p.observe(trial(0, "a", 1.0), island=0)
    p.observe(trial(1, "b", 2.0), island=1)
    p.observe(trial(2, "c", 3.0), island=0)
    assert "a" not in p.islands[1]
    p.observe(trial(3, "d", 4.0), island=1)  # the 4th finished trial: migrate
    assert "a" in p.islands[1] and "b" in p.islands[0]


def test_selection_favours_fast_members_and_is_reproducible() -> None:
    p = pop(capacity=5, islands=1)
    for i, ms in enumerate([1.0, 2.0, 4.0, 8.0, 16.0]):
        p.observe(trial(i, f"v{i}", ms), island=0)
    picks = [p.select(0, random.Random(s)) for s in range(300)]
    assert picks.count("v0") > picks.count("v4")
    rng_a, rng_b = random.Random(7), random.Random(7)
    assert [p.select(0, rng_a) for _ in range(5)] == [p.select(0, rng_b) for _ in range(5)]
    assert p.select(0, random.Random(1), exclude=[f"v{i}" for i in range(5)]) is None
    assert p.inspirations(0, exclude=["v0"], k=2) == ["v1", "v2"]
