"""``role=propose``: a proposer process that makes LLM children for evaluators elsewhere, known
to them by the state and heartbeat it writes into the study (``evolve.search.schedules.RemoteLLM``
reads it)."""

from __future__ import annotations

import logging
import threading
import time

from evolve.evolution.proposer import Proposal, Proposer
from evolve.record.schema import StudyAttr
from evolve.search.coordination import SharedStudy, beating
from evolve.search.schedules import AWAY, DONE, RUNNING
from evolve.settings import EvolutionSettings

log = logging.getLogger(__name__)
PROPOSER_POLL_S = 0.2  # a proposer process with nothing to do looks again this often


class ProposerProcess:
    """``role=propose``: make LLM children for evaluators elsewhere, saying in the study that it is
    alive (``RemoteLLM`` reads it). It proposes while fewer than ``Proposer.limit`` children await
    their result, until an LLM budget or the trial budget is spent. In rounds
    (``evolution.children_per_round``) it makes at most that many proposals, without waiting for
    results that only the next evaluator run brings, and leaves; the next round it starts from what
    the evaluators measured (a failed child's repair first)."""

    def __init__(self, proposer: Proposer, coordination: SharedStudy, settings: EvolutionSettings):
        self.proposer, self.coordination, self.evolution = proposer, coordination, settings
        self.ledger, self.study = proposer.ledger, proposer.ledger.study
        proposer.in_rounds = bool(settings.children_per_round)

    def run(self) -> str:
        """Why it stopped: an LLM budget, the trial budget, or the end of its round."""
        self.ledger.restore()
        made, state, reason = 0, AWAY, "stopped"  # stopped: interrupted, it may come back
        self._beat()
        try:
            with beating(self._beat, self.evolution.proposer_heartbeat_s):  # also while an LLM call waits
                reason, state, made = self._propose(self.evolution.children_per_round)
        finally:
            self.study.set_user_attr(StudyAttr.PROPOSER, {"state": state, "reason": reason})
        if reason == "round":
            log.info("round over after %d proposal(s): the evaluators measure what is queued; "
                     "then run this again", made)
        return reason

    def _beat(self) -> None:
        self.study.set_user_attr(StudyAttr.PROPOSER, {"state": RUNNING, "heartbeat": time.time()})

    def _propose(self, rounds: int) -> tuple[str, str, int]:
        """Propose until a budget is spent or, in rounds, the round is over: why, the state to
        leave in, and the proposals made. Up to ``llm.concurrency`` requests wait at once (a
        round's proposals need no result of each other: a mailbox or slow endpoint answers them
        side by side)."""
        ledger, made, ends = self.ledger, [0], []

        def next_proposal() -> tuple[Proposal | None, tuple[str, str] | None]:
            with ledger.lock:
                self.coordination.pull()
                if self.proposer.spent():
                    return None, (str(self.proposer.stopped), DONE)
                if ledger.used >= ledger.search.n_trials:
                    return None, ("budget", DONE)
                full = (rounds and made[0] >= rounds) or ledger.queue_full(rounds or self.proposer.limit)
                proposal = None if full else self.proposer.plan()
                if proposal is None:
                    return None, ("round", AWAY) if rounds else None
                made[0] += 1
                return proposal, None

        errors: list[BaseException] = []

        def propose() -> None:
            try:
                while not errors:
                    proposal, end = next_proposal()
                    if end is not None:
                        ends.append(end)
                        return
                    if proposal is None:
                        time.sleep(PROPOSER_POLL_S)
                        continue
                    outcome = self.proposer.ask(proposal)
                    with ledger.lock:
                        self.proposer.commit(proposal, *outcome)
            except BaseException as exc:  # raised in the process's thread below, as before threads
                errors.append(exc)

        threads = [threading.Thread(target=propose, daemon=True, name=f"evolve-proposer-{i}")
                   for i in range(self.proposer.threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        reason, state = next((e for e in ends if e[1] == DONE), ends[0])
        return reason, state, made[0]
