"""The LLM operators: mutate (whole kernel or SEARCH/REPLACE edits), crossover, repair, and
write (the first kernel of a task that has no seed).

A proposal reads the population as of a known number of finished trials, asks the LLM, parses
the answer (an unusable answer goes back to the LLM once with the reason), and commits the child
as a new variant with a WAITING trial at its parent's best tunables. Everything it did goes to
``llm.jsonl``, which is also the schedule that ``llm=replay`` follows to reproduce the run.
The proposer knows the run only through its ledger, and changes it under the ledger's lock.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from evolve.evolution.answers import AnswerError, parse_child
from evolve.evolution.llm import LLM, Completion, LLMError, Messages, Purpose
from evolve.evolution.llm.budget import LLMBudget
from evolve.evolution.llm.log import ExchangeLog, prompt_hash
from evolve.evolution.prompts import Failure, KernelView, Prompts
from evolve.kernel.spec import Variant
from evolve.record.schema import LLM_OPERATORS, Attr, Op, StudyAttr
from evolve.search import profiler
from evolve.search.ledger import Ledger
from evolve.search.population import Member
from evolve.settings import EvolutionSettings

MAX_FAILED_STREAK = 20
IDLE_POLL_S = 0.05  # a proposer thread with nothing to do looks again this often


@dataclass
class Proposal:
    """What one proposal will ask, fixed from the population as of ``seen`` finished trials."""

    index: int
    operator: str
    seen: int
    parents: list[str]
    island: int
    messages: Messages
    parent_source: str  # what SEARCH/REPLACE edits apply to (any operator may answer with edits)
    first_tunables: dict[str, int]


class Proposer:
    def __init__(self, ledger: Ledger, llm: LLM, budget: LLMBudget, prompts: Prompts,
                 log: ExchangeLog, settings: EvolutionSettings, seed: int | None, threads: int = 1):
        self.ledger, self.llm, self.budget, self.prompts = ledger, llm, budget, prompts
        self.log, self.evolution = log, settings
        self.rng = random.Random(seed)
        self.index = int(ledger.study.user_attrs.get(StudyAttr.PROPOSALS, 0))  # numbers go on over resumes
        self.threads = threads
        # in rounds (a proposer process whose children are measured after it leaves), a write need
        # not wait for another's measurement: none comes before the round is over
        self.in_rounds = False
        self.stopped: str | None = None  # why the proposer stopped (budget spent, ...)
        self.failures: dict[str, int] = {}
        self._streak = 0  # proposals in a row that gave no child
        self._idle_at: int | None = None  # the population's clock when there was nothing to propose

    @property
    def limit(self) -> int:
        """Children without a result at most: no more than the LLM works on at once, so that each
        proposal sees the outcome of all but the last few (``evolution.max_pending``)."""
        return max(1, min(self.evolution.max_pending, self.threads))

    @property
    def idle(self) -> bool:
        """Nothing to propose until the population changes."""
        return self._idle_at == self.ledger.observed

    def spent(self) -> bool:
        """Stop proposing once a cap is reached (calls already in flight still finish)."""
        cap = self.budget.exhausted()
        if cap and self.stopped is None:
            self.stopped = f"LLM budget spent ({cap})"
        return self.stopped is not None

    def run(self, stop: threading.Event) -> None:
        """Proposer thread: propose while fewer than ``limit`` children await their result."""
        while not stop.is_set() and self.stopped is None:
            with self.ledger.lock:
                busy = self.ledger.queue_full(self.limit)
                proposal = None if busy or self.spent() else self.plan()
                self._idle_at = None if busy or proposal is not None else self.ledger.observed
            if proposal is None:
                stop.wait(IDLE_POLL_S)
                continue
            outcome = self.ask(proposal)
            with self.ledger.lock:
                self.commit(proposal, *outcome)

    def run_once(self) -> None:
        """One proposal, in the evaluator's thread (``evolution.overlap=false``)."""
        with self.ledger.lock:
            proposal = None if self.spent() else self.plan()
            self._idle_at = None if proposal is not None else self.ledger.observed
        if proposal is not None:
            outcome = self.ask(proposal)
            with self.ledger.lock:
                self.commit(proposal, *outcome)

    # ---- planning (under the ledger's lock) ------------------------------------------
    def plan(self) -> Proposal | None:
        """Fix the next proposal from the current population; None if there is nothing to do."""
        ledger, pop = self.ledger, self.ledger.population
        index, seen = self.index, pop.observed
        if self.evolution.repair and (r := ledger.next_repair()) is not None:
            v = ledger.variants.get(r.vid)
            messages = self.prompts.repair(v.source, r.status, r.reason, r.diagnostics)
            meta = ledger.variants.meta[r.vid]
            parent_best = pop.members.get(meta.parents[0]) if meta.parents else None
            self._started()
            return Proposal(index, Op.REPAIR, seen, [r.vid], meta.island or 0, messages, v.source,
                        dict(parent_best.best.params) if parent_best else {})
        if not pop.members:
            return self._write() if not ledger.seed_ids else None
        islands = pop.nonempty_islands()
        island = islands[index % len(islands)]
        ops = {k: v for k, v in self.evolution.operators.items()
               if k in LLM_OPERATORS and k not in (Op.REPAIR, Op.WRITE) and v > 0}
        if len(pop.members) < 2:
            ops.pop(Op.CROSSOVER, None)
        if not ops:
            return None
        op = self.rng.choices(list(ops), weights=list(ops.values()))[0]
        a = pop.select(island, self.rng)
        assert a is not None
        failures = [Failure(*f) for f in ledger.recent_failures[-self.evolution.failures_shown:]]
        if op == Op.CROSSOVER:
            b = pop.select(island, self.rng, exclude=[a]) or next(
                v for v in pop.inspirations(island, [a], 1))
            views = self._view(pop.members[a], profiled=True), self._view(pop.members[b], profiled=True)
            messages = self.prompts.crossover(*views, failures)
            parents = [a, b]
        else:
            insp = [self._view(pop.members[v])
                    for v in pop.inspirations(island, [a], self.evolution.inspirations)]
            messages = self.prompts.mutate(self._view(pop.members[a], profiled=True), failures, insp,
                                           op == Op.MUTATE_DIFF)
            parents = [a]
        self._started()
        return Proposal(index, op, seen, parents, island, messages, ledger.variants.get(a).source,
                    dict(pop.members[a].best.params))

    def _write(self) -> Proposal | None:
        """A task without seeds: the LLM writes a first kernel (while none waits to be measured,
        except in rounds: there the round's writes are as many as the round asks, however fast the
        answers come, so that a replay of a round makes the proposals the recorded one made)."""
        ledger = self.ledger
        if (ledger.waiting and not self.in_rounds) or ledger.inflight >= self.threads:
            return None
        index = self.index
        self._started()
        return Proposal(index, Op.WRITE, ledger.population.observed, [], index % self.evolution.islands,
                    self.prompts.write(), "", {})

    def _started(self) -> None:
        self.index += 1
        self.ledger.study.set_user_attr(StudyAttr.PROPOSALS, self.index)
        self.ledger.proposal_started()

    def _view(self, m: Member, profiled: bool = False) -> KernelView:
        """``profiled``: with its recorded profile (a parent's; inspirations go without)."""
        a = m.best.user_attrs
        v = self.ledger.variants.get(m.vid)
        return KernelView(
            name=v.name, source=v.source, tunables=dict(m.best.params), time_ms=m.best_ms,
            gbps=a.get(Attr.GBPS, 0.0), fraction=a.get(Attr.BANDWIDTH_FRACTION, 0.0),
            registers=a.get(Attr.REGISTERS, "?"), local_bytes=a.get(Attr.LOCAL_BYTES, "?"),
            occupancy=a.get(Attr.OCCUPANCY, "?"),
            profile=self.ledger.study.user_attrs.get(profiler.key(m.vid)) if profiled else None,
        )

    # ---- asking (no lock held: this is the slow part) -----------------------------------
    def ask(self, proposal: Proposal, turns: int = 2, then: str | None = None
            ) -> tuple[Variant | None, str | None, list[str], Completion | None]:
        """Call the LLM (and once more if the answer is unusable); the child or why not.

        A replay passes the number of calls the recorded proposal made and, when the recorded one
        ran out of LLM budget, its reason: concurrency decided that, not the record."""
        calls: list[str] = []
        messages, last, unusable = proposal.messages, None, ""
        for turn in range(2):
            if turn >= turns:
                return None, then, calls, last
            try:
                completion = self._call(messages, proposal)
            except LLMError as exc:
                if exc.kind == "budget":
                    self.stopped = str(exc)
                else:
                    calls.append(prompt_hash(messages))
                why = f"llm_{exc.kind}: {exc}"
                # the first answer's flaw is the outcome; the refused retry only says why it stands
                return None, f"bad_answer: {unusable}; no retry ({why})" if unusable else why, calls, last
            calls.append(prompt_hash(messages))
            last = completion
            try:
                child = parse_child(completion.text, proposal.parent_source,
                                    f"{proposal.operator}-{proposal.index}")
                return child, None, calls, completion
            except AnswerError as exc:
                if turn == 1:
                    return None, f"bad_answer: {exc}", calls, completion
                unusable = str(exc)
                messages = self.prompts.retry(messages, completion.text, unusable)
        raise AssertionError("unreachable")

    def _call(self, messages: Messages, proposal: Proposal) -> Completion:
        self.budget.reserve()
        completion = None
        try:
            completion = self.llm.complete(messages, self._purpose(proposal))
            return completion
        except LLMError as exc:
            self.log.write("call", prompt_hash=prompt_hash(messages), proposal=proposal.index,
                           operator=proposal.operator, model=self.llm.model, messages=messages,
                           error=f"{exc.kind}: {exc}")
            raise
        finally:
            c = completion
            if c is not None and c.again:
                self.budget.release()  # counted when it was first taken
            else:
                self.budget.settle(c.prompt_tokens if c else 0, c.completion_tokens if c else 0,
                                   c.cost_usd if c else 0.0)
            if c is not None and not c.again:
                self.log.write("call", prompt_hash=prompt_hash(messages), proposal=proposal.index,
                               operator=proposal.operator, model=c.model, messages=messages,
                               response=c.text, prompt_tokens=c.prompt_tokens,
                               completion_tokens=c.completion_tokens, cost_usd=c.cost_usd,
                               latency_s=round(c.latency_s, 3), attempts=c.attempts)

    def _purpose(self, proposal: Proposal) -> Purpose:
        meta = self.ledger.variants.meta
        names = [meta[p].name if p in meta else p for p in proposal.parents]
        return Purpose(proposal.index, proposal.operator, tuple(zip(proposal.parents, names, strict=True)),
                       self.prompts.answer_format(proposal.operator == "mutate_diff"))

    # ---- committing (under the ledger's lock) -------------------------------------------
    def commit(self, proposal: Proposal, child: Variant | None, reason: str | None, calls: list[str],
               completion: Completion | None) -> None:
        """Register the child and queue its first trial; log the proposal."""
        ledger = self.ledger
        ledger.proposal_ended()
        c = completion
        model, tokens = (c.model, c.prompt_tokens + c.completion_tokens) if c else ("", 0)
        if child is not None and not ledger.variants.add(
                child, operator=proposal.operator, parents=proposal.parents, island=proposal.island,
                model=model, tokens=tokens):
            reason = f"duplicate: same code as {ledger.variants.get(child.id).name}"
            child = None
        if child is not None:
            first = proposal.first_tunables
            tunables = first if _fits(child, first) else child.spec.default
            ledger.enqueue(child, tunables, proposal.operator, parents=proposal.parents,
                           extra={Attr.LLM_MODEL: model, Attr.LLM_TOKENS: tokens})
        if reason:
            kind = reason.split(":", 1)[0]
            self.failures[kind] = self.failures.get(kind, 0) + 1
            self._streak += 1
            if self._streak >= MAX_FAILED_STREAK and self.stopped is None:
                self.stopped = f"{MAX_FAILED_STREAK} proposals in a row gave no child (last: {reason[:200]})"
        else:
            self._streak = 0
        self.log.write("proposal", index=proposal.index, operator=proposal.operator, seen=proposal.seen,
                       after=ledger.enqueued - (1 if child is not None else 0), parents=proposal.parents,
                       island=proposal.island, calls=calls, variant=child.id if child else None,
                       child=child.name if child else None, reason=reason)


def _fits(v: Variant, tunables: Mapping[str, int]) -> bool:
    names = {t.name for t in v.spec.tunables}
    if set(tunables) != names:
        return False
    try:
        v.spec.check(tunables)
    except Exception:
        return False
    return True
