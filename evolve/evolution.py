"""The LLM operators: mutate (whole kernel or SEARCH/REPLACE edits), crossover, repair, and
write (the first kernel of a task that has no seed).

A proposal reads the population as of a known number of finished trials, asks the LLM, parses
the answer (an unusable answer goes back to the LLM once with the reason), and commits the child
as a new variant with a WAITING trial at its parent's best tunables. Everything it did goes to
``llm.jsonl``, which is also the schedule that ``llm=replay`` follows to reproduce the run.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evolve.answers import AnswerError, parse_child
from evolve.llm import LLM, Completion, LLMError, Messages, Purpose
from evolve.llm.budget import LLMBudget
from evolve.llm.log import ExchangeLog, prompt_hash
from evolve.population import Member
from evolve.prompts import Failure, KernelView, Prompts
from evolve.spec import Variant

if TYPE_CHECKING:
    from evolve.search import Search

LLM_OPERATORS = ("mutate", "mutate_diff", "crossover", "repair", "write")
REPAIRABLE = ("compile_error", "launch_error", "wrong", "rejected")
MAX_FAILED_STREAK = 20


@dataclass(frozen=True)
class EvolutionSettings:
    islands: int = 2
    capacity: int = 8
    elite: int = 1
    migrate_every: int = 20
    novelty: float = 0.3
    inspirations: int = 2
    failures_shown: int = 3
    rates: Mapping[str, float] = field(default_factory=lambda: {"mutate": 0.5, "mutate_diff": 0.3,
                                                                 "crossover": 0.2})
    repair: bool = True
    tune_per_child: int = 6
    max_pending: int = 2
    overlap: bool = True
    idle_wait_s: float = 120.0
    prompts: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> EvolutionSettings:
        known = cls.__dataclass_fields__
        kw = {k: v for k, v in cfg.items() if k in known and k != "operators"}
        if "operators" in cfg:
            kw["rates"] = {k: float(v) for k, v in cfg["operators"].items()}
        return cls(**kw)


@dataclass
class Plan:
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
    def __init__(self, search: Search, llm: LLM, budget: LLMBudget, prompts: Prompts,
                 log: ExchangeLog, settings: EvolutionSettings, seed: int | None, threads: int = 1):
        self.search, self.llm, self.budget, self.prompts = search, llm, budget, prompts
        self.log, self.s = log, settings
        self.rng = random.Random(seed)
        self.index = 0
        self.threads = threads
        self.stopped: str | None = None  # why the proposer stopped (budget spent, ...)
        self.idle = False  # nothing to propose until the population changes
        self.failures: dict[str, int] = {}
        self._streak = 0  # proposals in a row that gave no child

    def spent(self) -> bool:
        """Stop proposing once a cap is reached (calls already in flight still finish)."""
        cap = self.budget.exhausted()
        if cap and self.stopped is None:
            self.stopped = f"LLM budget spent ({cap})"
        return self.stopped is not None

    def run(self, stop: threading.Event) -> None:
        """Proposer thread: keep up to ``max_pending`` children waiting for the GPU."""
        while not stop.is_set() and self.stopped is None:
            with self.search.lock:
                busy = self.search.waiting >= self.s.max_pending or self.search.budget_full()
                plan = None if busy or self.spent() else self.plan()
                self.idle = not busy and plan is None
            if plan is None:
                stop.wait(0.05)
                continue
            outcome = self.ask(plan)
            with self.search.lock:
                self.commit(plan, *outcome)

    def run_once(self) -> None:
        """One proposal, in the evaluator's thread (``evolution.overlap=false``)."""
        with self.search.lock:
            plan = None if self.spent() else self.plan()
            self.idle = plan is None
        if plan is not None:
            outcome = self.ask(plan)
            with self.search.lock:
                self.commit(plan, *outcome)

    # ---- planning (under the search lock) ---------------------------------------------
    def plan(self) -> Plan | None:
        """Fix the next proposal from the current population; None if there is nothing to do."""
        search, pop = self.search, self.search.population
        index, seen = self.index, pop.observed
        if self.s.repair and search.repairable:
            vid, status, reason, diagnostics = search.repairable.pop(0)
            v = search.variants.get(vid)
            messages = self.prompts.repair(v.source, status, reason, diagnostics)
            meta = search.variants.meta[vid]
            parent_best = pop.members.get(meta["parents"][0]) if meta["parents"] else None
            self.index += 1
            search.inflight += 1
            return Plan(index, "repair", seen, [vid], meta.get("island", 0), messages, v.source,
                        dict(parent_best.best.params) if parent_best else {})
        if not pop.members:
            return self._write() if not search.seed_ids else None
        islands = pop.nonempty_islands()
        island = islands[index % len(islands)]
        ops = {k: v for k, v in self.s.rates.items()
               if k in LLM_OPERATORS and k not in ("repair", "write") and v > 0}
        if len(pop.members) < 2:
            ops.pop("crossover", None)
        if not ops:
            return None
        op = self.rng.choices(list(ops), weights=list(ops.values()))[0]
        a = pop.select(island, self.rng)
        assert a is not None
        failures = [Failure(*f) for f in search.recent_failures[-self.s.failures_shown:]]
        if op == "crossover":
            b = pop.select(island, self.rng, exclude=[a]) or next(
                v for v in pop.inspirations(island, [a], 1))
            views = self._view(pop.members[a]), self._view(pop.members[b])
            messages = self.prompts.crossover(*views, failures)
            parents = [a, b]
        else:
            insp = [self._view(pop.members[v]) for v in pop.inspirations(island, [a], self.s.inspirations)]
            messages = self.prompts.mutate(self._view(pop.members[a]), failures, insp, op == "mutate_diff")
            parents = [a]
        self.index += 1
        search.inflight += 1
        return Plan(index, op, seen, parents, island, messages, search.variants.get(a).source,
                    dict(pop.members[a].best.params))

    def _write(self) -> Plan | None:
        """A task without seeds: the LLM writes a first kernel (while none waits to be measured)."""
        search = self.search
        if search.waiting or search.inflight >= self.threads:
            return None
        index = self.index
        self.index += 1
        search.inflight += 1
        return Plan(index, "write", search.population.observed, [], index % self.s.islands,
                    self.prompts.write(), "", {})

    def _view(self, m: Member) -> KernelView:
        a = m.best.user_attrs
        v = self.search.variants.get(m.vid)
        return KernelView(
            name=v.name, source=v.source, tunables=dict(m.best.params), time_ms=m.best_ms,
            gbps=a.get("gbps", 0.0), fraction=a.get("bandwidth_fraction", 0.0),
            registers=a.get("registers", "?"), local_bytes=a.get("local_bytes", "?"),
            occupancy=a.get("occupancy", "?"),
        )

    # ---- asking (no lock held: this is the slow part) -----------------------------------
    def ask(self, plan: Plan, turns: int = 2, then: str | None = None
            ) -> tuple[Variant | None, str | None, list[str], Completion | None]:
        """Call the LLM (and once more if the answer is unusable); the child or why not.

        A replay passes the number of calls the recorded proposal made and, when the recorded one
        ran out of LLM budget, its reason: concurrency decided that, not the record."""
        calls: list[str] = []
        messages, last = plan.messages, None
        for turn in range(2):
            if turn >= turns:
                return None, then, calls, last
            try:
                completion = self._call(messages, plan)
            except LLMError as exc:
                if exc.kind == "budget":
                    self.stopped = str(exc)
                else:
                    calls.append(prompt_hash(messages))
                return None, f"llm_{exc.kind}: {exc}", calls, last
            calls.append(prompt_hash(messages))
            last = completion
            try:
                child = parse_child(completion.text, plan.parent_source, f"{plan.operator}-{plan.index}")
                return child, None, calls, completion
            except AnswerError as exc:
                if turn == 1:
                    return None, f"bad_answer: {exc}", calls, completion
                messages = self.prompts.retry(messages, completion.text, str(exc))
        raise AssertionError("unreachable")

    def _call(self, messages: Messages, plan: Plan) -> Completion:
        self.budget.reserve()
        completion = None
        try:
            completion = self.llm.complete(messages, self._purpose(plan))
            return completion
        except LLMError as exc:
            self.log.write("call", prompt_hash=prompt_hash(messages), proposal=plan.index,
                           operator=plan.operator, model=self.llm.model, messages=messages,
                           error=f"{exc.kind}: {exc}")
            raise
        finally:
            c = completion
            self.budget.settle(c.prompt_tokens if c else 0, c.completion_tokens if c else 0,
                               c.cost_usd if c else 0.0)
            if c is not None:
                self.log.write("call", prompt_hash=prompt_hash(messages), proposal=plan.index,
                               operator=plan.operator, model=c.model, messages=messages,
                               response=c.text, prompt_tokens=c.prompt_tokens,
                               completion_tokens=c.completion_tokens, cost_usd=c.cost_usd,
                               latency_s=round(c.latency_s, 3), attempts=c.attempts)

    def _purpose(self, plan: Plan) -> Purpose:
        names = [self.search.variants.meta.get(p, {}).get("name", p) for p in plan.parents]
        return Purpose(plan.index, plan.operator, tuple(zip(plan.parents, names, strict=True)),
                       self.prompts.answer_format(plan.operator == "mutate_diff"))

    # ---- committing (under the search lock) ---------------------------------------------
    def commit(self, plan: Plan, child: Variant | None, reason: str | None, calls: list[str],
               completion: Completion | None) -> None:
        """Register the child and queue its first trial; log the proposal."""
        search = self.search
        search.inflight -= 1
        c = completion
        model, tokens = (c.model, c.prompt_tokens + c.completion_tokens) if c else ("", 0)
        if child is not None and not search.variants.add(
                child, operator=plan.operator, parents=plan.parents, island=plan.island, model=model,
                tokens=tokens):
            reason = f"duplicate: same code as {search.variants.get(child.id).name}"
            child = None
        if child is not None:
            tunables = plan.first_tunables if _fits(child, plan.first_tunables) else child.spec.default
            search.enqueue(child, tunables, plan.operator, parents=plan.parents,
                           extra={"llm_model": model, "llm_tokens": tokens})
        if reason:
            kind = reason.split(":", 1)[0]
            self.failures[kind] = self.failures.get(kind, 0) + 1
            self._streak += 1
            if self._streak >= MAX_FAILED_STREAK and self.stopped is None:
                self.stopped = f"{MAX_FAILED_STREAK} proposals in a row gave no child (last: {reason[:200]})"
        else:
            self._streak = 0
        self.log.write("proposal", index=plan.index, operator=plan.operator, seen=plan.seen,
                       after=search.enqueued - (1 if child is not None else 0), parents=plan.parents,
                       island=plan.island, calls=calls, variant=child.id if child else None,
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
