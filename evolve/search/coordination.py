"""Processes that share one study: heartbeats, trials of dead evaluators, others' results.

Evaluators and a proposer share nothing but the storage. A measuring evaluator marks its trial
alive every ``search.heartbeat_s``; a RUNNING trial silent for ``search.stale_after_s`` lost its
evaluator (killed, machine gone) and is queued again by whoever notices. Silent means that its mark
has not changed for that long by the watcher's own clock (``HeartbeatWatch``): a mark is written
with the writer's clock, and machines' clocks disagree (a storage copied from another machine
carries the times of its clock), so a mark is compared only with its earlier value, never with the
local time. Results of the others reach this process's ledger by pulling them from the storage.

A process's coordination is named for who else is on its study. ``SoleEvaluator`` is the one
evaluator of a study (``role=all``): a RUNNING trial it finds at start was left by a run that died.
``SharedStudy`` is one of several processes on a study: evaluators (``role=evaluate``) and a
proposer (``role=propose``), so it is named for the study they share, not for a role.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from evolve.evaluate.measurement import NOT_COUNTED, Status
from evolve.kernel.spec import candidate_key
from evolve.record import schema as record
from evolve.record.schema import Attr
from evolve.search.ledger import Ledger
from evolve.settings import SearchSettings

log = logging.getLogger(__name__)
CLAIM_POLL_S = 0.5  # at most this long between looks at an earlier trial that may yet be cut


@contextlib.contextmanager
def beating(mark: Callable[[], None], every_s: float) -> Iterator[None]:
    """While inside: ``mark`` every ``every_s`` from a thread, so that a long step (a measurement,
    an LLM call waiting an hour for an answer in a mailbox) never looks like a dead process. No mark
    comes after the block is left."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            mark()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def alive(study: optuna.Study, trial_id: int, every_s: float) -> contextlib.AbstractContextManager[None]:
    """While measuring: tell other processes the trial's evaluator is alive."""
    return beating(lambda: record.mark_alive(study, trial_id), every_s)


class HeartbeatWatch:
    """How long heartbeats have not changed, by this process's clock (``time.monotonic``).

    A heartbeat seen for the first time, or changed since last look, has been silent for 0 s
    whatever time it holds: a dead process's last mark is noticed ``stale_after_s`` after it is
    first seen, and a live one on a machine whose clock is ahead or behind is never taken for dead."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, tuple[Any, float]] = {}

    def silent_for(self, key: Hashable, mark: Any) -> float:
        now = time.monotonic()
        last = self._seen.get(key)
        if last is None or last[0] != mark:
            self._seen[key] = (mark, now)
            return 0.0
        return now - last[1]

    def keep(self, keys: set[Hashable]) -> None:
        """Forget what is no longer watched."""
        self._seen = {k: v for k, v in self._seen.items() if k in keys}


def _requeue_dead(study: optuna.Study, t: FrozenTrial) -> bool:
    """Queue again a trial whose evaluator died; False if another process ended it first."""
    status = record.requeue(study, record.trial_id(t), died=True)
    if status is Status.CRASHED:
        log.warning("trial %d: evaluators died %d times measuring this candidate: recorded as crashed, "
                    "not retried", t.number, record.MAX_DEATHS)
    return status is not None


class SoleEvaluator:
    """The only evaluator of its study."""

    def __init__(self, study: optuna.Study, ledger: Ledger):
        self.study, self.ledger = study, ledger

    def recover(self) -> None:
        """Queue again what a run that died left RUNNING (its candidate may have killed it: see
        ``record.requeue``)."""
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.user_attrs.get(Attr.VARIANT) in self.ledger.variants:
                _requeue_dead(self.study, t)

    def sync(self) -> None:
        """Nobody else changes the study."""

    def claim(self, trial_id: int, vid: str, params: Mapping[str, Any]) -> Status | None:
        """Every trial this process pops is its own to measure."""
        return None

    def drain(self) -> None:
        """Nothing of another's can be left RUNNING."""


class SharedStudy:
    """One of several processes on the study."""

    def __init__(self, study: optuna.Study, ledger: Ledger, settings: SearchSettings):
        self.study, self.ledger, self.search = study, ledger, settings
        self._last_reap = 0.0
        self._watch = HeartbeatWatch()

    def recover(self) -> None:
        """RUNNING trials are being measured by the others; ``reap`` notices the dead."""

    def sync(self) -> None:
        """Before each decision of the evaluator's loop: reap now and then, then pull."""
        if time.monotonic() - self._last_reap > self.search.heartbeat_s:
            self.reap()
            self._last_reap = time.monotonic()
        self.pull()

    def pull(self) -> None:
        """Catch up with what the others put in the storage: their variants, the results of
        their trials (for tuners and population) and what is queued or being measured."""
        self.ledger.variants.load()
        self.ledger.sync()

    def reap(self) -> int:
        """Queue again the RUNNING trials whose evaluator stopped beating (killed, machine lost)."""
        stale, running = 0, self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        self._watch.keep({record.trial_id(t) for t in running})
        for t in running:
            if self._watch.silent_for(record.trial_id(t), record.heartbeat(t)) > self.search.stale_after_s:
                stale += _requeue_dead(self.study, t)
        if stale:
            log.warning("ended %d trial(s) whose evaluator stopped (no heartbeat for %.0f s)",
                        stale, self.search.stale_after_s)
        return stale

    def claim(self, trial_id: int, vid: str, params: Mapping[str, Any]) -> Status | None:
        """Why a popped trial is not this evaluator's to measure, or None.

        The budget is the first ``n_trials`` trials in the order they were created (those not
        excluded), and a candidate is measured by whoever holds its first trial. Creation order
        is the storage's trial id."""
        while True:
            earlier = [t for t in self.study.get_trials(deepcopy=False)
                       if record.trial_id(t) < trial_id and t.user_attrs.get(Attr.STATUS) not in NOT_COUNTED]
            if len(earlier) < self.search.n_trials:
                break
            running = sum(t.state == TrialState.RUNNING for t in earlier)
            if len(earlier) - running >= self.search.n_trials or not running:
                return Status.OVER_BUDGET
            # an earlier trial still measuring may yet be cut (its evaluator dies): wait and see
            record.mark_alive(self.study, trial_id)
            time.sleep(min(self.search.heartbeat_s, CLAIM_POLL_S))
            self.reap()
        key = candidate_key(vid, params)
        if any(record.candidate_of(t) == key for t in earlier):
            return Status.DUPLICATE
        return None

    def drain(self) -> None:
        """Before leaving, queue again the trials of evaluators that died, so none stays RUNNING."""
        deadline = time.monotonic() + self.search.stale_after_s + 2 * self.search.heartbeat_s
        self.reap()  # what is RUNNING now is watched from now on
        self.pull()
        while self.ledger.running and time.monotonic() < deadline:
            time.sleep(self.search.heartbeat_s)
            self.reap()
            self.pull()
