"""Several processes on one study, seen from one of them: heartbeats, reaping, claiming, draining.

A real SQLite study; the other processes' doings are written into it directly, as they would."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from evolve.evaluate.measurement import Status
from evolve.kernel.spec import candidate_key
from evolve.record import schema as record
from evolve.record.variants import VariantStore
from evolve.search.coordination import SharedStudy, SoleEvaluator, alive
from evolve.search.ledger import Ledger
from evolve.settings import EvolutionSettings, SearchSettings
from tests.helpers.tasks import task, variant_store

NAIVE = task("softmax").seeds()[0]


def shared(store: VariantStore, n_trials: int = 10, stale_after_s: float = 0.2) -> SharedStudy:
    s = SearchSettings(n_trials=n_trials, seed=0, heartbeat_s=0.05, stale_after_s=stale_after_s)
    led = Ledger(store.study, store, s, EvolutionSettings())
    led.add_seeds([NAIVE])
    return SharedStudy(store.study, led, s)


def queue(p: SharedStudy, cfg: dict[str, int]) -> None:
    with p.ledger.lock:
        p.ledger.enqueue(NAIVE, cfg, "tune", parents=[NAIVE.id])


def popped(p: SharedStudy) -> int:
    """An evaluator pops the next queued trial and says it is alive (as the loop does)."""
    tid = record.trial_id(p.study.ask())
    record.mark_alive(p.study, tid)
    return tid


@pytest.fixture
def store(tmp_path: Path) -> VariantStore:
    return variant_store(tmp_path)


def test_a_silent_trial_is_queued_again_and_a_candidate_that_killed_two_evaluators_is_crashed(
        store: VariantStore) -> None:
    p = shared(store)
    queue(p, {"BLOCK": 64})
    popped(p)  # its evaluator dies: no more heartbeats
    assert p.reap() == 0, "not silent for long yet"
    time.sleep(0.3)
    assert p.reap() == 1
    trials = store.study.get_trials(deepcopy=False)
    assert trials[0].user_attrs["status"] == "interrupted" and trials[1].state == TrialState.WAITING
    popped(p)  # another evaluator takes it, and dies too
    assert p.reap() == 0, "first seen now"
    time.sleep(0.3)
    assert p.reap() == 1
    crashed = store.study.get_trials(deepcopy=False)[-1]
    assert crashed.user_attrs["status"] == "crashed" and crashed.state == TrialState.FAIL
    assert len(store.study.get_trials(deepcopy=False)) == 2, "not queued a third time"
    p.pull()
    assert p.ledger.used == 1 and p.ledger.failures == {"crashed": 1}
    tuner = p.ledger.tuner(NAIVE.id)
    assert tuner.results == {candidate_key(NAIVE.id, {"BLOCK": 64}): None}, "the tuner saw it fail"


def test_a_trial_whose_evaluator_beats_is_never_reaped(store: VariantStore) -> None:
    p = shared(store)
    queue(p, {"BLOCK": 64})
    tid = popped(p)
    with alive(store.study, tid, every_s=0.05):
        time.sleep(0.5)  # more than twice stale_after_s
        assert p.reap() == 0
    assert store.study.get_trials(deepcopy=False)[0].state == TrialState.RUNNING


@pytest.mark.parametrize("skew_s", [-3600.0, 3600.0])
def test_a_heartbeat_is_judged_by_whether_it_changes_not_by_the_time_it_holds(
        store: VariantStore, monkeypatch: pytest.MonkeyPatch, skew_s: float) -> None:
    """An evaluator on a machine whose clock is an hour ahead or behind (or a storage copied from
    one) writes marks that look an hour stale or an hour in the future: a live one is never
    reaped, a dead one is reaped ``stale_after_s`` after it was first seen."""
    p = shared(store, stale_after_s=1.0)  # wide margins: a loaded CI machine delays the steps below
    queue(p, {"BLOCK": 64})
    queue(p, {"BLOCK": 128})
    skewed = time.time
    monkeypatch.setattr(record.time, "time", lambda: skewed() + skew_s)  # the other machine's clock
    live, dead = popped(p), popped(p)
    with alive(store.study, live, every_s=0.05):
        assert p.reap() == 0, "neither is reaped on sight"
        time.sleep(0.1)
        assert p.reap() == 0, "the dead one has not been silent for 1 s yet"
        time.sleep(1.2)
        assert p.reap() == 1
    states = {record.trial_id(t): t.state for t in store.study.get_trials(deepcopy=False)}
    assert states[live] == TrialState.RUNNING and states[dead] == TrialState.FAIL


def test_a_twin_is_not_measured_and_does_not_use_up_the_budget(store: VariantStore) -> None:
    p = shared(store, n_trials=2)
    for block in (64, 64, 128):  # two processes queued the same candidate at once
        queue(p, {"BLOCK": block})
    first, twin = store.study.ask(), store.study.ask()
    assert p.claim(record.trial_id(first), NAIVE.id, {"BLOCK": 64}) is None
    assert p.claim(record.trial_id(twin), NAIVE.id, {"BLOCK": 64}) is Status.DUPLICATE
    record.skip(store.study, twin, Status.DUPLICATE)
    store.study.tell(first, 1.0)
    assert p.claim(record.trial_id(store.study.ask()), NAIVE.id, {"BLOCK": 128}) is None


def test_a_trial_beyond_the_budget_waits_for_an_earlier_one_that_may_yet_be_cut(store: VariantStore) -> None:
    p = shared(store, n_trials=1)
    for block in (64, 128):
        queue(p, {"BLOCK": block})
    popped(p)  # the budget's one trial; its evaluator dies
    second = store.study.ask()
    t0 = time.monotonic()
    assert p.claim(record.trial_id(second), NAIVE.id, {"BLOCK": 128}) is None, "the dead one's slot"
    assert time.monotonic() - t0 >= 0.2  # waited until the first was silent for stale_after_s
    assert store.study.get_trials(deepcopy=False)[0].user_attrs["status"] == "interrupted"
    store.study.tell(second, 1.0)
    again = store.study.ask()  # the first candidate, queued again: now beyond the budget
    assert p.claim(record.trial_id(again), NAIVE.id, {"BLOCK": 64}) is Status.OVER_BUDGET


def test_alone_queues_again_what_a_dead_run_left_running(store: VariantStore) -> None:
    p = shared(store)
    queue(p, {"BLOCK": 64})
    popped(p)
    SoleEvaluator(store.study, p.ledger).recover()
    trials = store.study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert record.deaths(trials[1]) == 1


def test_drain_waits_for_a_dead_evaluators_trial_to_be_reaped(store: VariantStore) -> None:
    p = shared(store, stale_after_s=0.2)
    queue(p, {"BLOCK": 64})
    popped(p)  # its evaluator is dead
    t0 = time.monotonic()
    p.drain()
    assert time.monotonic() - t0 < 2.0
    assert not store.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    assert p.ledger.running == 0 and p.ledger.waiting == 1
