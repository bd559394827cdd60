"""Schedules without a loop: what comes next, and how an evaluator judges a proposer process."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evolve.evolution.llm.budget import LLMBudget, Prices
from evolve.evolution.llm.log import ExchangeLog
from evolve.evolution.llm.mailbox import Mailbox
from evolve.evolution.process import ProposerProcess
from evolve.evolution.prompts import Prompts
from evolve.evolution.proposer import Proposer
from evolve.hardware import named
from evolve.paths import KERNELS_DIR
from evolve.record.schema import StudyAttr
from evolve.record.variants import VariantStore
from evolve.search.coordination import SharedStudy
from evolve.search.ledger import Ledger
from evolve.search.schedules import Action, RemoteLLM, Tuning, proposer_done
from evolve.settings import EvolutionSettings, LLMSettings, SearchSettings
from tests.helpers.openai_server import kernel_answer
from tests.helpers.runs import finish
from tests.helpers.tasks import hardware_config, task, variant_store


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


def beat(store: VariantStore, state: str, age_s: float = 0.0) -> None:
    store.study.set_user_attr(StudyAttr.PROPOSER, {"state": state, "heartbeat": time.time() - age_s})


def idle_ledger(store: VariantStore, idle_s: float) -> Ledger:
    led = Ledger(store.study, store, SearchSettings(n_trials=100, seed=0), EvolutionSettings())
    led.last_work = time.monotonic() - idle_s
    return led


@pytest.mark.parametrize("age_s", [0.0, 3600.0, -3600.0])
def test_a_proposer_process_counts_while_its_heartbeat_changes(store: VariantStore, age_s: float) -> None:
    """Whatever time its heartbeat holds (written by another machine's clock): it is alive while the
    heartbeat changes, and taken for dead once it has not for ``proposer_stale_after_s``."""
    remote = RemoteLLM(store.study, EvolutionSettings(idle_wait_s=30, proposer_stale_after_s=0.2))
    assert not remote.active() and remote.may_bring(idle_s=10) and not remote.may_bring(idle_s=31)
    beat(store, "running", age_s)
    assert remote.active() and not remote.quiet()
    assert remote.while_working(idle_ledger(store, idle_s=60)) == Action.WAIT, "for its child"
    time.sleep(0.15)
    beat(store, "running", age_s - 0.15)
    assert remote.active(), "it beat: seen alive from now on"
    time.sleep(0.15)
    assert remote.active(), "0.15 s since it last beat"
    time.sleep(0.1)
    assert not remote.active(), "silent for longer than evolution.proposer_stale_after_s"
    proposer_done(store.study, "LLM budget spent")
    assert not remote.active() and not remote.may_bring(idle_s=0), "done: nothing to wait for"



@pytest.mark.parametrize(("rounds", "state"), [(2, None), (0, "away"), (2, "running")])
def test_an_evaluator_in_rounds_measures_what_it_earned_then_leaves(
        store: VariantStore, rounds: int, state: str | None) -> None:
    """Away, or in rounds not come yet or fallen silent: what is queued and the tuning it earned,
    then, with nothing new for ``idle_wait_s``, leave instead of tuning the rest of the budget."""
    if state is not None:
        beat(store, state, age_s=3600)  # a proposer that left (or was killed) on another machine
    evo = EvolutionSettings(idle_wait_s=30, children_per_round=rounds, tune_per_child=2,
                            proposer_stale_after_s=0.1)
    remote = RemoteLLM(store.study, evo)
    led = Ledger(store.study, store, SearchSettings(n_trials=100, seed=0), evo)
    led.add_seeds(task("softmax").seeds()[:1])
    assert remote.active() and remote.next(led) == Action.EVALUATE, "the seed"
    led.credits, led.waiting = 2, 0  # it earned two tuning trials
    assert remote.next(led) == Action.EVALUATE and remote.next(led) == Action.EVALUATE
    led.credits, led.waiting = 0, 0
    time.sleep(0.15)
    assert remote.next(led) == Action.WAIT, "nothing more earned: wait a while for something new"
    led.last_work -= 31
    assert remote.next(led) == Action.IDLE
    proposer_done(store.study, "LLM budget spent")
    assert not remote.active(), "done: the rest of the budget is tuned"


def mailbox_proposer(store: VariantStore, tmp_path: Path, evo: EvolutionSettings,
                     threads: int = 1) -> tuple[Proposer, Ledger, SearchSettings]:
    """A proposer asking through a mailbox in tmp_path/mb, after the softmax seed was measured."""
    s = SearchSettings(n_trials=10, seed=0)
    led = Ledger(store.study, store, s, evo)
    led.add_seeds([task("softmax").seeds()[0]])
    led.propose_seed()
    led.observe(finish(store, store.study.ask(), 3.0))
    led.used = 1
    mailbox = Mailbox(LLMSettings(name="mailbox", mailbox=str(tmp_path / "mb"), timeout_s=30, poll_s=0.01),
                      Prices({}))
    proposer = Proposer(led, mailbox, LLMBudget(store.study, 5, None, None),
                        Prompts(task("softmax"), named(hardware_config("h200")), includes=()),
                        ExchangeLog(tmp_path / "llm.jsonl"), evo, seed=0, threads=threads)
    return proposer, led, s


def test_a_proposer_process_beats_while_it_waits_for_an_answer(store: VariantStore, tmp_path: Path) -> None:
    """An answer that takes longer than ``proposer_stale_after_s`` (a person at a mailbox) does
    not make the proposer look dead; when its round is over it says it is away."""
    evo = EvolutionSettings(proposer_heartbeat_s=0.05, proposer_stale_after_s=0.3, children_per_round=1)
    proposer, led, s = mailbox_proposer(store, tmp_path, evo)
    out: list[str] = []
    shared = SharedStudy(store.study, led, s)
    th = threading.Thread(target=lambda: out.append(ProposerProcess(proposer, shared, evo).run()))
    th.start()
    remote = RemoteLLM(store.study, EvolutionSettings(proposer_stale_after_s=0.3))  # a live evaluator
    while not (tmp_path / "mb/0001.request.json").exists():
        assert th.is_alive()
        time.sleep(0.01)
    for _ in range(10):  # a second of waiting for the answer
        assert remote.active() and remote.while_working(idle_ledger(store, 60)) == Action.WAIT
        time.sleep(0.1)
    block_row = (KERNELS_DIR / "softmax/block_row.cu").read_text()
    (tmp_path / "mb/0001.answer.md").write_text(kernel_answer(block_row))
    (tmp_path / "mb/0001.answer.done").touch()
    th.join(10)
    assert out == ["round"]
    assert store.study.user_attrs[StudyAttr.PROPOSER] == {"state": "away", "reason": "round"}
    assert led.children_out() == 1, "its child waits for the evaluators"


def test_an_error_in_a_proposer_thread_reaches_the_process_and_leaves_it_away(
        store: VariantStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while asking (here: the storage) ends ``role=propose`` with that error, as it did
    before the requests were asked side by side, and the study says the proposer is away."""
    evo = EvolutionSettings(children_per_round=3)
    proposer, led, s = mailbox_proposer(store, tmp_path, evo, threads=3)

    def broken(*_: object, **__: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(proposer, "ask", broken)
    with pytest.raises(OSError, match="disk full"):
        ProposerProcess(proposer, SharedStudy(store.study, led, s), evo).run()
    assert store.study.user_attrs[StudyAttr.PROPOSER]["state"] == "away"
