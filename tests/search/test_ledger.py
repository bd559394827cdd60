"""The ledger without a loop: queue, budget, restore and sync against a real SQLite study."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from optuna.trial import TrialState

from evolve.kernel.spec import Variant
from evolve.record import schema as record
from evolve.record.schema import Attr, Op
from evolve.record.variants import VariantStore
from evolve.search.ledger import Ledger
from evolve.settings import EvolutionSettings, SearchSettings
from tests.helpers.runs import finish
from tests.helpers.tasks import task, variant_store

SEEDS = task("softmax").seeds()  # naive, block_row


Queued = list[tuple[str, dict[str, int]]]


def ledger(store: VariantStore, n_trials: int = 20, prefetched: Queued | None = None,
           **evolution: object) -> Ledger:
    def prefetch(v: Variant, cfg: Mapping[str, int]) -> None:
        if prefetched is not None:
            prefetched.append((v.name, dict(cfg)))

    return Ledger(store.study, store, SearchSettings(n_trials=n_trials, seed=0),
                  EvolutionSettings(**evolution), prefetch=prefetch)  # type: ignore[arg-type]




def measure(led: Ledger, value: float | None) -> None:
    """This process takes the next queued candidate and tells its result."""
    trial = led.study.ask()
    led.take()
    frozen = finish(led.variants, trial, value)
    with led.lock:
        led.observe(frozen)
    led.used += 1


@pytest.fixture
def store(tmp_path: Path) -> VariantStore:
    return variant_store(tmp_path)


def test_each_seed_default_is_queued_once_in_order(store: VariantStore) -> None:
    prefetched: Queued = []
    led = ledger(store, prefetched=prefetched)
    led.add_seeds(SEEDS)
    assert led.propose_seed() and led.propose_seed() and not led.propose_seed()
    waiting = store.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.user_attrs[Attr.VARIANT_NAME] for t in waiting] == ["naive", "block_row"]
    assert [record.fixed_params(t) for t in waiting] == [v.spec.default for v in SEEDS]
    assert {t.user_attrs[Attr.OPERATOR] for t in waiting} == {Op.SEED}
    assert (led.waiting, led.enqueued) == (2, 2)
    assert prefetched == [("naive", SEEDS[0].spec.default), ("block_row", SEEDS[1].spec.default)]


def test_tuning_never_queues_a_candidate_twice_and_pays_with_credits(store: VariantStore) -> None:
    led = ledger(store, tune_per_child=3)
    led.add_seeds(SEEDS[:1])
    led.propose_seed()
    measure(led, 3.0)
    assert led.credits == 3, "a seed's first result earns its tuning credits"
    queued = []
    while led.propose_tune():
        queued.append(tuple(sorted(record.fixed_params(store.study.trials[-1]).items())))
        measure(led, 2.0)
    space = len(SEEDS[0].spec.space())
    assert len(queued) == space - 1 == len(set(queued)), "the rest of the space, each once"
    assert led.credits == 3 - (space - 1)
    assert led.tuner(SEEDS[0].id).exhausted and led.best() == 2.0


def test_a_failed_llm_child_is_offered_for_repair_once(store: VariantStore) -> None:
    led = ledger(store)
    led.add_seeds(SEEDS[:1])
    child = Variant.parse(SEEDS[1].source, name="mutate-0")
    store.add(child, operator=Op.MUTATE, parents=[SEEDS[0].id], island=0)
    with led.lock:
        led.enqueue(child, child.spec.default, Op.MUTATE, parents=[SEEDS[0].id])
    trial = store.study.ask()
    led.take()
    trial.set_user_attr(Attr.REASON, "its reason")
    trial.set_user_attr(Attr.DIAGNOSTICS, "its diagnostics")
    led.observe(finish(store, trial, None, status="compile_error"))
    assert led.failures == {"compile_error": 1}
    assert led.recent_failures == [("mutate-0", "compile_error", "its reason")]
    r = led.next_repair()
    assert r is not None
    assert (r.vid, r.status, r.diagnostics) == (child.id, "compile_error", "its diagnostics")
    assert led.next_repair() is None


def test_the_budget_counts_what_is_queued_measured_elsewhere_and_on_its_way(store: VariantStore) -> None:
    led = ledger(store, n_trials=10)
    led.used, led.waiting, led.running, led.inflight = 6, 2, 1, 1
    assert not led.budget_full()  # 6 + 2 + 1 (the one measured elsewhere is not charged to this process)
    led.inflight = 2
    assert led.budget_full()
    led.inflight = 0
    assert not led.queue_full(max_pending=1), "no LLM child is out: queued tuning does not hold a proposer"
    led.used = 7
    assert led.queue_full(max_pending=1), "7 + 3 pending: the budget is spoken for"


def test_a_proposer_waits_for_the_results_of_its_children_not_for_the_queue(store: VariantStore) -> None:
    """Children count against ``max_pending`` from the moment they are asked for until their first
    result is in, whether they wait for an evaluator or are being measured."""
    led = ledger(store)
    led.add_seeds(SEEDS[:1])
    led.propose_seed()
    measure(led, 3.0)
    led.proposal_started()
    assert led.queue_full(max_pending=1) and not led.queue_full(max_pending=2), "one being asked for"
    led.proposal_ended()
    child = Variant.parse(SEEDS[1].source, name="mutate-0")
    store.add(child, operator=Op.MUTATE, parents=[SEEDS[0].id], island=0)
    with led.lock:
        led.enqueue(child, child.spec.default, Op.MUTATE, parents=[SEEDS[0].id])
        led.propose_tune()  # the seed's tuning, queued behind the child: not a child
    assert led.children_out() == 1 and led.queue_full(max_pending=1)
    trial = store.study.ask()
    led.take()
    assert led.waiting == 1 and led.queue_full(max_pending=1), "taken, not measured: still out"
    led.observe(finish(store, trial, None, status="compile_error"))
    assert led.children_out() == 0 and not led.queue_full(max_pending=1), "its result is in"
    other = ledger(store)  # another process (a proposer elsewhere) sees the same from the record
    other.add_seeds(SEEDS[:1])
    other.variants.load()
    other.restore()
    assert other.children_out() == 0 and other.repairable[0].vid == child.id


def test_restore_and_sync_rebuild_what_another_process_did(store: VariantStore) -> None:
    mine = ledger(store)
    mine.add_seeds(SEEDS)
    mine.propose_seed()
    mine.propose_seed()
    measure(mine, 3.0)  # naive's default
    elsewhere = store.study.ask()  # block_row's default, being measured by another process
    with mine.lock:
        mine.propose_tune()  # naive again, queued
    theirs = ledger(store)  # a process joins: same study, same variants
    theirs.add_seeds(SEEDS)
    theirs.restore()
    assert (theirs.used, theirs.waiting, theirs.running, theirs.enqueued) == (1, 1, 1, 3)
    assert theirs.tuner(SEEDS[0].id).n_measured == 1 and theirs.best() == 3.0
    assert theirs.observed == 1 and SEEDS[0].id in theirs.population.members
    assert theirs.tuner(SEEDS[1].id).known(SEEDS[1].spec.default), "what others measure is not proposed"
    finish(store, elsewhere, 0.5)
    theirs.sync()
    assert (theirs.used, theirs.waiting, theirs.running) == (2, 1, 0)
    assert theirs.best() == 0.5 and theirs.observed == 2
    theirs.sync()
    assert theirs.observed == 2, "a trial is observed once"
