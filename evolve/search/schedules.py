"""What is proposed next: the seeds' defaults, tuning, and LLM children from this process, from a
proposer process elsewhere (``evolve.evolution.process``), or from a recorded run (``llm=replay``).

The evaluator's loop asks its schedule for the next action under the ledger's lock; schedules
differ only in where LLM children come from, so each source is one class:

- ``Tuning``: no LLM.
- ``LocalLLM``: a proposer in this process, in threads beside the GPU work or, without
  ``evolution.overlap``, one proposal at a time in the evaluator's thread.
- ``RemoteLLM``: a ``role=propose`` process on the same study (``ProposerProcess``), known only
  by the state and heartbeat it writes into the study; it may also come and go in rounds, the
  storage copied between machines in between (``evolution.children_per_round``).
- ``Replay``: each recorded proposal is made when the record is where it was originally made,
  so a seeded replay proposes and measures what the recorded run did.
"""

from __future__ import annotations

import logging
import threading
import time
from enum import StrEnum
from typing import Any, Protocol

import optuna

from evolve.record.schema import StudyAttr
from evolve.search.coordination import HeartbeatWatch
from evolve.search.ledger import Ledger
from evolve.settings import EvolutionSettings

log = logging.getLogger(__name__)
# what a proposer process says of itself in the study (StudyAttr.PROPOSER)
RUNNING = "running"  # proposing now; its heartbeat changes every evolution.proposer_heartbeat_s
AWAY = "away"  # left after its round (or was stopped), and comes back: more children will come
DONE = "done"  # no more children: its LLM budget is spent, the trial budget is, or there is no LLM


class Proposing(Protocol):
    """What a schedule asks of an LLM proposer (``evolve.evolution.proposer.Proposer``), which lives
    in a layer above the search: the loop knows it only by this."""

    stopped: Any  # why it stopped proposing (a budget), or None while it goes on
    idle: bool  # nothing to propose until a result comes in
    threads: int

    def run(self, stop: threading.Event) -> None: ...
    def run_once(self) -> None: ...
    def plan(self) -> Any: ...  # the next proposal, or None
    def ask(self, proposal: Any, turns: int = 2, then: str | None = None) -> Any: ...
    def commit(self, proposal: Any, *outcome: Any) -> None: ...


class Action(StrEnum):
    EVALUATE = "evaluate"  # measure the next queued candidate
    PROPOSE = "propose"  # make one LLM proposal in this thread
    WAIT = "wait"  # for a child, or for another process
    EXHAUSTED = "exhausted"  # nothing left to propose
    IDLE = "idle"  # nothing new for evolution.idle_wait_s, and more may come later (rounds)


class Schedule(Protocol):
    """What the evaluator's loop does next, and where its LLM children come from."""

    proposer: Proposing | None  # an LLM proposer in this process

    def next(self, ledger: Ledger) -> Action:
        """Called under the ledger's lock; queues what it proposes."""

    def quiet(self) -> bool:
        """No child can come before the next tuning trials: they may be queued ahead."""

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """Threads that propose beside the loop until ``stop`` is set."""

    def propose(self) -> None:
        """One proposal in the loop's thread (``Action.PROPOSE``)."""


def _take(ledger: Ledger) -> Action:
    ledger.take()
    return Action.EVALUATE


class LiveSchedule:
    """The schedule of a live run: seeds first; then tuning, which each new variant pays for with
    credits while an LLM proposes; the rest of the budget is kept for children on their way.
    Subclasses say whether an LLM is at work and what to do while it is."""

    proposer: Proposing | None = None

    def next(self, ledger: Ledger) -> Action:
        if ledger.waiting or ledger.propose_seed():
            return _take(ledger)
        n = ledger.search.n_trials
        if ledger.inflight and ledger.used + ledger.waiting + ledger.inflight >= n:
            return Action.WAIT  # the rest of the budget is reserved for children on their way
        if ledger.used + ledger.running >= n:
            return Action.WAIT  # the rest of the budget is being measured by other evaluators
        llm = self.active() and not ledger.budget_full()
        if (not llm or ledger.credits > 0) and ledger.propose_tune():
            return _take(ledger)
        if llm and (action := self.while_working(ledger)) is not None:
            return action
        # the LLM is done or has nothing to work on yet: tune whatever is left
        if ledger.propose_tune():
            return _take(ledger)
        if ledger.inflight or ledger.running or self.may_bring(time.monotonic() - ledger.last_work):
            return Action.WAIT
        return Action.EXHAUSTED

    def active(self) -> bool:
        """An LLM may still bring children."""
        return False

    def while_working(self, ledger: Ledger) -> Action | None:
        """What to do while the LLM works on a child; None if it has nothing to work on."""
        return None

    def may_bring(self, idle_s: float) -> bool:
        """Whether to wait for work, with nothing queued, after ``idle_s`` seconds without any."""
        return False

    def quiet(self) -> bool:
        return not self.active()

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        return []

    def propose(self) -> None:
        raise AssertionError("only a proposer without overlap proposes in the evaluator's thread")


class Tuning(LiveSchedule):
    """No LLM: seeds and tuning only."""


class LocalLLM(LiveSchedule):
    def __init__(self, proposer: Proposing, overlap: bool):
        self.proposer, self.overlap = proposer, overlap

    def active(self) -> bool:
        return self.proposer.stopped is None

    def while_working(self, ledger: Ledger) -> Action | None:
        if self.proposer.idle:
            return None
        return Action.WAIT if self.overlap else Action.PROPOSE

    def quiet(self) -> bool:
        return False  # what comes next is the proposer's call

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        if not self.overlap:
            return []
        threads = [threading.Thread(target=self.proposer.run, args=(stop,), daemon=True,
                                    name=f"evolve-proposer-{i}") for i in range(self.proposer.threads)]
        for th in threads:
            th.start()
        return threads

    def propose(self) -> None:
        self.proposer.run_once()


class RemoteLLM(LiveSchedule):
    """The LLM works in a proposer process (``role=evaluate``), known by what it says in the study:

    - running, its heartbeat changing: wait for its children (meanwhile tune with the credits
      each new variant earned);
    - away (it made its round's children, or was stopped, and comes back): measure what is queued
      and the tuning it earned, wait ``evolution.idle_wait_s`` for anything new, then leave
      (``Action.IDLE``): the next round starts this process again;
    - done: tune the rest of the budget.

    Before any proposer said anything, or once one fell silent (killed): in rounds
    (``evolution.children_per_round``) as if away; otherwise tune, and once nothing is left wait
    ``idle_wait_s`` for one to start. The heartbeat is judged by ``HeartbeatWatch``, not by comparing
    times: it was written with another machine's clock."""

    def __init__(self, study: optuna.Study, settings: EvolutionSettings):
        self.study, self.evolution = study, settings
        self._watch = HeartbeatWatch()

    def _state(self) -> dict[str, Any]:
        return self.study.user_attrs.get(StudyAttr.PROPOSER) or {}

    def _beating(self) -> bool:
        state = self._state()
        return (state.get("state") == RUNNING and self._watch.silent_for(
            StudyAttr.PROPOSER, state.get("heartbeat")) < self.evolution.proposer_stale_after_s)

    def _returns(self) -> bool:
        """Its children come later, in another round."""
        state = self._state().get("state")
        return state == AWAY or (self.evolution.children_per_round > 0 and state != DONE)

    def active(self) -> bool:
        return self._beating() or self._returns()

    def while_working(self, ledger: Ledger) -> Action | None:
        if self._beating() or time.monotonic() - ledger.last_work < self.evolution.idle_wait_s:
            return Action.WAIT  # for the proposer process's next child
        if ledger.running:
            return Action.WAIT  # measured elsewhere: it may come back (its evaluator died) to measure here
        return Action.IDLE

    def may_bring(self, idle_s: float) -> bool:
        return self._state().get("state") != DONE and idle_s < self.evolution.idle_wait_s


def proposer_done(study: optuna.Study, reason: str) -> None:
    """Tell evaluators of the study not to wait for children."""
    study.set_user_attr(StudyAttr.PROPOSER, {"state": DONE, "reason": reason})


class Replay:
    """``llm=replay``: the recorded proposals (``llm.jsonl``), each made once as many trials are
    finished as when it was planned, and committed once as many candidates are queued as when it
    was. Between recorded children it tunes as the original run did; if the record runs out of
    configurations first (it diverged), the next child is taken early."""

    def __init__(self, proposer: Proposing, proposals: list[dict[str, Any]]):
        self.proposer = proposer
        self.schedule = sorted(proposals, key=lambda p: p["index"])
        self._held: list[tuple[dict[str, Any], Any, Any]] = []

    def next(self, ledger: Ledger) -> Action:
        self._follow(ledger)
        if ledger.waiting or ledger.propose_seed() or ledger.propose_tune():
            return _take(ledger)
        while self._held and not ledger.waiting:
            self._commit_held(ledger, force=True)
        return _take(ledger) if ledger.waiting else Action.EXHAUSTED

    def quiet(self) -> bool:
        return False  # a replay follows the recorded order

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        return []  # proposals are made when the record says, in the loop's thread

    def propose(self) -> None:
        raise AssertionError("a replay proposes from next()")

    def _follow(self, ledger: Ledger) -> None:
        while self.schedule and self.schedule[0]["seen"] <= ledger.observed:
            entry = self.schedule.pop(0)
            proposal = self.proposer.plan()
            reason = entry.get("reason") or ""
            refused = reason.startswith("llm_budget") or "; no retry (llm_budget" in reason
            outcome = None if proposal is None else self.proposer.ask(
                proposal, turns=len(entry["calls"]), then=reason if refused else None)
            self._held.append((entry, proposal, outcome))
        self._commit_held(ledger, force=False)

    def _commit_held(self, ledger: Ledger, force: bool) -> None:
        for item in list(self._held):
            entry, proposal, outcome = item
            if proposal is None or outcome is None:
                self._held.remove(item)
            elif force or entry["after"] <= ledger.enqueued:
                self._held.remove(item)
                self.proposer.commit(proposal, *outcome)
                if force:
                    return
