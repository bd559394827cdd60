"""The study's schema on its own, in a real SQLite study: re-queueing, dead evaluators, the winner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from evolve.evaluate.measurement import Status
from evolve.record import schema as record
from evolve.record.schema import Attr, Op
from evolve.record.variants import VariantStore
from tests.helpers.tasks import task, variant_store


@pytest.fixture
def store(tmp_path: Path) -> VariantStore:
    return variant_store(tmp_path)


def running(store: VariantStore, params: dict[str, int]) -> optuna.trial.Trial:
    """A candidate being measured: queued with its origin, then popped by an evaluator."""
    v = task("softmax").seeds()[0]
    record.enqueue(store.study, params, {Attr.VARIANT: v.id, Attr.VARIANT_NAME: v.name,
                                         Attr.OPERATOR: Op.TUNE, Attr.PARENTS: [v.id]})
    return store.study.ask()


def test_an_interrupt_requeues_the_candidate_however_often_it_happens(store: VariantStore) -> None:
    for n in range(3):
        tid = record.trial_id(running(store, {"BLOCK": 128}) if n == 0 else store.study.ask())
        assert record.requeue(store.study, tid) is Status.INTERRUPTED
    trials = store.study.get_trials(deepcopy=False)
    assert [t.user_attrs[Attr.STATUS] for t in trials[:3]] == ["interrupted"] * 3
    waiting = trials[-1]
    assert waiting.state == TrialState.WAITING and record.fixed_params(waiting) == {"BLOCK": 128}
    assert record.deaths(waiting) == 0, "Ctrl-C is not the candidate's doing"
    assert [waiting.user_attrs[k] for k in record.ORIGIN] == [trials[0].user_attrs[k] for k in record.ORIGIN]
    assert not any(record.counts_toward_budget(t) for t in trials)


def test_the_second_dead_evaluator_finishes_the_candidate_as_crashed(store: VariantStore) -> None:
    first = record.trial_id(running(store, {"BLOCK": 64}))
    assert record.requeue(store.study, first, died=True) is Status.INTERRUPTED
    second = record.trial_id(store.study.ask())
    assert record.deaths(record.stored(store.study, second)) == 1
    assert record.requeue(store.study, second) is Status.INTERRUPTED  # a Ctrl-C in between keeps the count
    third = record.trial_id(store.study.ask())
    assert record.requeue(store.study, third, died=True) is Status.CRASHED
    crashed = record.stored(store.study, third)
    assert crashed.state == TrialState.FAIL and crashed.user_attrs[Attr.STATUS] == "crashed"
    assert "died 2 times" in crashed.user_attrs[Attr.REASON]
    assert record.counts_toward_budget(crashed), "a crash is a failed candidate: it counts"
    assert record.fixed_params(crashed) == {"BLOCK": 64}
    assert not store.study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))


def test_a_trial_another_process_finished_is_left_alone(store: VariantStore) -> None:
    trial = running(store, {"BLOCK": 256})
    store.study.tell(trial, 1.0)
    assert record.requeue(store.study, record.trial_id(trial), died=True) is None
    assert len(store.study.get_trials(deepcopy=False)) == 1


@dataclass
class Check:
    trial: int
    status: str

    @property
    def passed(self) -> bool:
        return self.status == "ok"


def test_the_winner_is_the_first_that_passed_else_the_fastest(store: VariantStore) -> None:
    for block, ms in ((64, 2.0), (128, 1.0), (256, 1.0), (512, 3.0)):
        store.study.tell(running(store, {"BLOCK": block}), ms)
    store.study.tell(running(store, {"BLOCK": 128}), 0.5)  # the same candidate measured again
    trials = store.study.get_trials(deepcopy=False)
    ranked = record.ranked(trials)
    assert [t.number for t in ranked] == [4, 2, 0, 3], "fastest first, one per candidate, ties by number"
    assert record.winner(trials).number == 4
    assert record.winner(trials, [Check(4, "wrong"), Check(2, "ok")]).number == 2
    assert record.winner(trials, [Check(4, "wrong")]) is None
    best = record.fastest_per_variant(trials)
    assert list(best) == [task("softmax").seeds()[0].id] and best[task("softmax").seeds()[0].id].number == 4
