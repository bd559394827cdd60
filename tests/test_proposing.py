"""Schedules without a loop: what comes next, and how an evaluator judges a proposer process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import task, variant_store

from evolve.ledger import Ledger
from evolve.proposing import Action, RemoteLLM, Tuning, proposer_done
from evolve.record import StudyAttr
from evolve.settings import EvolutionSettings, SearchSettings
from evolve.variants import VariantStore


@pytest.fixture
def store(tmp_path: Path) -> VariantStore:
    return variant_store(tmp_path)


def test_tuning_queues_seeds_then_the_space_then_stops(store: VariantStore) -> None:
    seeds = task("softmax").seeds()
    led = Ledger(store.study, store, SearchSettings(n_trials=100, seed=0), EvolutionSettings())
    led.add_seeds(seeds)
    schedule, queued = Tuning(), 0
    while (action := schedule.next(led)) == Action.EVALUATE:
        queued += 1
        trial = store.study.ask()
        if queued <= len(seeds):
            assert trial.user_attrs["operator"] == "seed"
        store.study.tell(trial, 1.0 + queued)
        with led.lock:
            led.observe(store.study.trials[-1])
        led.used += 1
    assert action == Action.EXHAUSTED
    assert queued == sum(len(v.spec.space()) for v in seeds) and led.waiting == 0
    assert schedule.quiet(), "without an LLM the next candidates may be queued ahead"


def test_an_evaluator_waits_while_others_measure_the_rest_of_the_budget(store: VariantStore) -> None:
    led = Ledger(store.study, store, SearchSettings(n_trials=5, seed=0), EvolutionSettings())
    led.add_seeds(task("softmax").seeds()[:1])
    led.tuner(task("softmax").seeds()[0].id).mark_pending({"BLOCK": 256})  # the seed: measured elsewhere
    led.used, led.running = 3, 2
    assert Tuning().next(led) == Action.WAIT, "one of the two may yet be cut"
    led.running = 0
    assert Tuning().next(led) == Action.EVALUATE


def beat(store: VariantStore, state: str, age_s: float) -> None:
    store.study.set_user_attr(StudyAttr.PROPOSER, {"state": state, "heartbeat": time.time() - age_s})


def test_a_proposer_process_counts_while_its_heartbeat_is_recent(store: VariantStore) -> None:
    remote = RemoteLLM(store.study, EvolutionSettings(idle_wait_s=30))
    assert not remote.active() and remote.may_bring(idle_s=10) and not remote.may_bring(idle_s=31)
    beat(store, "running", age_s=10)
    assert remote.active() and remote.while_working() == Action.WAIT and not remote.quiet()
    beat(store, "running", age_s=61)
    assert not remote.active(), "silent for longer than evolution.proposer_stale_after_s (60)"
    assert RemoteLLM(store.study, EvolutionSettings(proposer_stale_after_s=120)).active()
    proposer_done(store.study, "LLM budget spent")
    assert not remote.active() and not remote.may_bring(idle_s=0), "done: nothing to wait for"
