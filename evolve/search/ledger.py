"""The budget and the queue of a run, as one process sees them: what is spent, queued, being
measured or on its way from the LLM, and each variant's tuner.

The study in storage is the truth; a ledger is rebuilt from it on start (``restore``) and kept
current from the results this process tells (``observe``) and, with other processes on the study,
from theirs (``sync``). Candidates enter the queue only through ``enqueue``, which also tells the
variant's tuner, so nothing is proposed twice. The evaluator's loop and the LLM proposer share
one ledger and change it under ``lock`` only.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from evolve.kernel.spec import Variant
from evolve.record import schema as record
from evolve.record.schema import LLM_OPERATORS, REPAIRABLE, Attr, Op
from evolve.record.variants import VariantStore
from evolve.search.population import Population
from evolve.search.samplers import make_sampler
from evolve.search.tuner import VariantTuner
from evolve.settings import EvolutionSettings, SearchSettings

MAX_BLIND_TRIES = 2  # configurations tried of a variant that has never produced a correct result
Prefetch = Callable[[Variant, Mapping[str, int]], None]


@dataclass(frozen=True)
class Repair:
    """A failed LLM child, for the repair operator."""

    vid: str
    status: str
    reason: str
    diagnostics: str


class Ledger:
    def __init__(self, study: optuna.Study, variants: VariantStore, search: SearchSettings,
                 evolution: EvolutionSettings, prefetch: Prefetch | None = None):
        self.study, self.variants, self.search, self.evolution = study, variants, search, evolution
        self.prefetch = prefetch  # told of each queued candidate (the backend compiles ahead)
        self.lock = threading.RLock()
        self.tuners: dict[str, VariantTuner] = {}
        self.seed_ids: list[str] = []
        self.population = Population(
            evolution.islands, evolution.capacity, evolution.elite, evolution.migrate_every,
            evolution.novelty, source=lambda vid: self.variants.get(vid).source,
        )
        self.used = 0  # finished trials that count toward the budget
        self.enqueued = 0  # candidates queued, over the whole study
        self.waiting = 0  # of them, queued and not taken by an evaluator yet
        self.running = 0  # of them, being measured by another process
        self.inflight = 0  # LLM proposals planned and not yet committed (each may bring a child)
        self.credits = 0  # tuning trials allowed before the next LLM child
        self.last_work = time.monotonic()  # when this process last took or finished a candidate
        self.failures: dict[str, int] = {}  # failed trials by status
        self.repairable: list[Repair] = []
        self.recent_failures: list[tuple[str, str, str]] = []  # LLM children: (name, status, reason)
        self._observed: set[int] = set()  # trial numbers already fed to tuners and population

    # ---- building -------------------------------------------------------------------------------
    def add_seeds(self, seeds: Iterable[Variant]) -> None:
        for i, v in enumerate(seeds):
            self.variants.add(v, operator=Op.SEED, parents=[], island=i % self.evolution.islands)
            self.seed_ids.append(v.id)

    def tuner(self, vid: str) -> VariantTuner:
        if vid not in self.tuners:
            v = self.variants.get(vid)
            self.tuners[vid] = VariantTuner(vid, v.spec, make_sampler(self.search.sampler, self.search.seed),
                                            self.search.seed, self.search.climb)
        return self.tuners[vid]

    def restore(self) -> None:
        """Rebuild tuners, population and counters from the record (a resumed run, a process
        joining others)."""
        used = 0
        for t in self._trials():
            if t.user_attrs.get(Attr.VARIANT) not in self.variants:
                continue
            if t.state in (TrialState.WAITING, TrialState.RUNNING):
                self.tuner(t.user_attrs[Attr.VARIANT]).mark_pending(record.fixed_params(t))
                self.waiting += t.state == TrialState.WAITING
                self.running += t.state == TrialState.RUNNING
                self.enqueued += 1
            elif record.counts_toward_budget(t):
                used += 1
                self.enqueued += 1
                self.observe(t)
        self.used = used
        repaired = {p for m in self.variants.meta.values() if m.operator == Op.REPAIR for p in m.parents}
        self.repairable = [r for r in self.repairable if r.vid not in repaired]

    def sync(self) -> None:
        """Catch up with the trials other processes queued, measured or are measuring."""
        trials = self._trials()
        with self.lock:
            for t in trials:
                vid = t.user_attrs.get(Attr.VARIANT)
                if t.number in self._observed or vid not in self.variants:
                    continue
                if record.counts_toward_budget(t):
                    self.observe(t)
                elif t.state in (TrialState.WAITING, TrialState.RUNNING):
                    self.tuner(vid).mark_pending(record.fixed_params(t))
            self.used = sum(record.counts_toward_budget(t) for t in trials)
            self.waiting = sum(t.state == TrialState.WAITING for t in trials)
            self.running = sum(t.state == TrialState.RUNNING for t in trials)

    def _trials(self) -> list[FrozenTrial]:
        return sorted(self.study.get_trials(deepcopy=False), key=lambda t: t.number)

    def observe(self, t: FrozenTrial) -> None:
        """Feed one finished trial to its tuner, the population and the failure lists."""
        self._observed.add(t.number)
        vid = t.user_attrs[Attr.VARIANT]
        meta = self.variants.meta[vid]
        tuner = self.tuner(vid)
        first = tuner.n_measured == 0
        tuner.observe(record.fixed_params(t), t.value if t.state == TrialState.COMPLETE else None)
        self.population.observe(t, meta.island or 0)
        op = t.user_attrs.get(Attr.OPERATOR)
        if op == Op.TUNE:
            self.credits -= 1
        elif first and op in (Op.SEED, *LLM_OPERATORS):
            self.credits += self.evolution.tune_per_child
        if t.state == TrialState.FAIL:
            status = t.user_attrs.get(Attr.STATUS, "?")
            self.failures[status] = self.failures.get(status, 0) + 1
            if first and op in LLM_OPERATORS:
                reason = str(t.user_attrs.get(Attr.REASON, ""))
                self.recent_failures.append((meta.name, status, reason))
                if status in REPAIRABLE and op != Op.REPAIR:
                    diagnostics = str(t.user_attrs.get(Attr.DIAGNOSTICS, ""))
                    self.repairable.append(Repair(vid, status, reason, diagnostics))

    @property
    def observed(self) -> int:
        """Finished trials seen so far, in order: the population's clock."""
        return self.population.observed

    # ---- the budget -----------------------------------------------------------------------------
    def budget_full(self) -> bool:
        """Every trial left is spoken for (queued, or a child on its way)."""
        return self.used + self.waiting + self.inflight >= self.search.n_trials

    def queue_full(self, max_pending: int) -> bool:
        """For a proposer: ``max_pending`` LLM children have no result yet, or the budget is
        spoken for (counting what other processes are measuring). A proposal planned while
        children are out would not see what they show (a failure to repair or to avoid), so the
        proposer waits for their outcome rather than plan more of them blind."""
        if self.inflight + self.children_out() >= max_pending:
            return True
        return self.used + self.waiting + self.running + self.inflight >= self.search.n_trials

    def children_out(self) -> int:
        """LLM children queued or being measured whose first result is not in yet."""
        meta = self.variants.meta
        return sum(1 for vid, tuner in self.tuners.items()
                   if tuner.pending and not tuner.n_measured and meta[vid].operator in LLM_OPERATORS)

    def best(self) -> float | None:
        values = [t.best for t in self.tuners.values() if t.best is not None]
        return min(values) if values else None

    # ---- the queue ------------------------------------------------------------------------------
    def enqueue(self, v: Variant, cfg: Mapping[str, int], operator: str, parents: list[str],
                extra: Mapping[str, Any] | None = None) -> None:
        """Queue a candidate as a WAITING trial that carries its variant (call under ``lock``)."""
        self.tuner(v.id).mark_pending(cfg)
        record.enqueue(self.study, cfg, {Attr.VARIANT: v.id, Attr.VARIANT_NAME: v.name,
                                         Attr.OPERATOR: operator, Attr.PARENTS: parents, **(extra or {})})
        self.enqueued += 1
        self.waiting += 1
        if self.prefetch is not None:
            self.prefetch(v, cfg)

    def take(self) -> None:
        """An evaluator takes the next queued candidate."""
        self.waiting -= 1
        self.last_work = time.monotonic()

    def propose_seed(self) -> bool:
        """Queue the next seed's default configuration, if one is not measured yet."""
        for vid in self.seed_ids:
            v = self.variants.get(vid)
            if not self.tuner(vid).known(v.spec.default):
                self.enqueue(v, v.spec.default, Op.SEED, parents=self.variants.meta[vid].parents)
                return True
        return False

    def propose_tune(self) -> bool:
        """Queue the next configuration of the most promising variant that has one left."""
        active = [v for v in self.variants if self._tunable(v.id)]
        while active:
            v = min(active, key=lambda v: self._score(v.id))
            cfg = self.tuner(v.id).propose()
            if cfg is not None:
                self.enqueue(v, cfg, Op.TUNE, parents=[v.id])
                return True
            active.remove(v)
        return False

    def _tunable(self, vid: str) -> bool:
        """Configurations left, and not a variant that failed twice without ever working."""
        tuner = self.tuner(vid)
        return not tuner.exhausted and (tuner.best is not None or tuner.n_measured < MAX_BLIND_TRIES)

    def _score(self, vid: str) -> float:
        """Lower confidence bound on the variant's best time: few trials, more optimism."""
        tuner = self.tuner(vid)
        if tuner.best is None:
            return math.inf
        return tuner.best * (1 - self.search.explore / math.sqrt(1 + tuner.n_measured))

    # ---- LLM proposals --------------------------------------------------------------------------
    def proposal_started(self) -> None:
        self.inflight += 1

    def proposal_ended(self) -> None:
        self.inflight -= 1

    def next_repair(self) -> Repair | None:
        return self.repairable.pop(0) if self.repairable else None
