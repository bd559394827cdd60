"""The evaluator's loop: Optuna owns the budget and the record, the backend measures.

One study per run. Every candidate is one trial, proposed by enqueueing it (a WAITING trial
that carries its variant) and evaluated by popping it with ``ask``; the two halves meet only
in the storage, so a resumed run, or another process, continues where the last one stopped.
Failed candidates are FAIL trials with their reason, so the budget and the dashboard see them.

The loop asks its schedule (schedules.py) what to do next, keeps its ledger (ledger.py) current,
and leaves other processes on the study to its coordination (coordination.py).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

import optuna
from optuna.trial import TrialState
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from evolve.evaluate.backend import Backend
from evolve.evaluate.measurement import Measurement, Status
from evolve.evaluate.objective import Objective
from evolve.hardware import Hardware
from evolve.kernel.spec import Variant
from evolve.record import schema as record
from evolve.record.schema import Attr, StudyAttr, Verdicts, flip_note
from evolve.record.variants import VariantStore
from evolve.search.coordination import SharedStudy, SoleEvaluator, alive
from evolve.search.ledger import Ledger
from evolve.search.profiler import Profiler
from evolve.search.schedules import Action, Schedule, Tuning
from evolve.settings import EvolutionSettings, SearchSettings
from evolve.task.task import Task

__all__ = ["Search", "SearchSettings"]  # the settings too, for whoever runs the loop directly

log = logging.getLogger(__name__)
EVALUATOR = f"{socket.gethostname()}:{os.getpid()}"  # which evaluator measured a trial
WAIT_S = 0.05  # the loop looks again this often while it waits
JOIN_S = 2.0  # on leaving, an LLM call in flight is abandoned after this long (Ctrl-C)
Callback = Callable[[Variant, Mapping[str, int], Measurement], None]


class Search:
    """Measure queued candidates until the budget, the time limit or the space runs out."""

    def __init__(self, study: optuna.Study, variants: VariantStore, backend: Backend, task: Task,
                 objective: Objective, hardware: Hardware, settings: SearchSettings,
                 callbacks: Iterable[Callback] = (), evolution: EvolutionSettings | None = None, *,
                 ledger: Ledger | None = None, schedule: Schedule | None = None,
                 coordination: SoleEvaluator | SharedStudy | None = None):
        self.study, self.variants, self.backend = study, variants, backend
        self.task, self.objective, self.hw, self.search = task, objective, hardware, settings
        self.callbacks = list(callbacks)
        self.ledger = ledger or Ledger(study, variants, settings, evolution or EvolutionSettings(),
                                       prefetch=backend.prefetch)
        self.schedule = schedule or Tuning()
        self.coordination = coordination or SoleEvaluator(study, self.ledger)
        self.profiler = (Profiler(study, backend, objective.sizes(task)[0])
                         if self.ledger.evolution.profile else None)
        self._verdicts = Verdicts()

    def add_seeds(self, seeds: Iterable[Variant]) -> None:
        self.ledger.add_seeds(seeds)

    def run(self) -> str:
        """Search until the budget, the time limit or the space runs out; say which."""
        ledger = self.ledger
        self.coordination.recover()
        ledger.restore()
        if self.profiler is not None:
            pop = ledger.population
            self.profiler.backfill((pop.members[vid].best.number, self.variants.get(vid),
                                    pop.members[vid].best.params, pop.members[vid].best_ms)
                                   for vid in sorted({v for island in pop.islands for v in island}))
        elapsed = resumed = float(self.study.user_attrs.get(StudyAttr.ELAPSED_S, 0.0))
        bar = tqdm(total=self.search.n_trials, initial=min(ledger.used, self.search.n_trials), unit="trial",
                   desc=self.study.study_name, dynamic_ncols=True,
                   disable=not (self.search.progress and sys.stderr.isatty()))
        self._postfix(bar)
        stop = threading.Event()
        threads = self.schedule.start(stop)
        reason = "budget"
        try:
            with logging_redirect_tqdm(), bar:
                while ledger.used < self.search.n_trials:
                    if self.search.timeout is not None and elapsed >= self.search.timeout:
                        reason = "timeout"
                        break
                    t0 = time.monotonic()
                    self.coordination.sync()
                    with ledger.lock:
                        action = self.schedule.next(ledger)
                    if action == Action.WAIT:
                        time.sleep(WAIT_S)
                    elif action == Action.PROPOSE:
                        self.schedule.propose()
                    elif action == Action.EXHAUSTED:
                        reason = "exhausted"
                        break
                    elif action == Action.IDLE:  # the wait for the next round is not search time
                        reason = "idle"
                        log.info("nothing new to measure: leaving until the proposer's next round "
                                 "(run this again once it has queued children)")
                        elapsed = max(resumed, elapsed - (time.monotonic() - ledger.last_work))
                        self.study.set_user_attr(StudyAttr.ELAPSED_S, elapsed)
                        break
                    else:
                        if self._evaluate_next():
                            ledger.used += 1
                            bar.update()
                        ledger.last_work = time.monotonic()
                    elapsed += time.monotonic() - t0
                    self.study.set_user_attr(StudyAttr.ELAPSED_S, elapsed)
                    self._postfix(bar)
        finally:
            stop.set()
            for th in threads:
                th.join(timeout=JOIN_S)
        self.coordination.drain()
        return reason

    def _evaluate_next(self) -> bool:
        """Measure the next queued trial; False if it was not ours to measure (budget, twin)."""
        trial = self.study.ask()
        tid = record.trial_id(trial)
        record.mark_alive(self.study, tid)
        trial.set_user_attr(Attr.EVALUATOR, EVALUATOR)
        vid = trial.user_attrs.get(Attr.VARIANT)
        if vid is None:  # Optuna made a fresh trial: the queue was emptied by another evaluator
            record.skip(self.study, trial, Status.NO_CANDIDATE)
            return False
        if vid not in self.variants:
            self.variants.load()  # made by another process since we last looked
        if vid not in self.variants:
            record.skip(self.study, trial, Status.REJECTED, "trial carries no known variant")
            return True
        variant = self.variants.get(vid)
        fixed = record.fixed_params(record.stored(self.study, tid))
        if (why := self.coordination.claim(tid, vid, fixed)) is not None:
            record.skip(self.study, trial, why)
            return False
        tunables = {
            t.name: trial.suggest_int(t.name, t.values[0], t.values[-1]) for t in variant.spec.tunables
        }
        self._look_ahead()
        try:
            with alive(self.study, tid, self.search.heartbeat_s):
                m = self.backend.evaluate(variant, tunables, self.objective.sizes(self.task))
                value = self.objective.value_ms(m, self.task) if m.ok else None
                if value is not None and self.profiler is not None:
                    member = self.ledger.population.members.get(vid)
                    found = self.profiler.after(trial.number, variant, tunables, value,
                                                member.best_ms if member else None)
                    m = m if found is None else replace(m, profile=found)
        except KeyboardInterrupt:
            record.requeue(self.study, tid)
            raise
        record.write_measurement(trial, variant, tunables, m, self.task, self.hw, self.variants.artifacts)
        if self._verdicts.add(variant.name, m.status, m.reason):
            log.warning(flip_note(variant.name, *self._verdicts.counts[variant.name]))
        best = self.ledger.best()
        frozen = self.study.tell(trial, value) if value is not None else self.study.tell(
            trial, state=TrialState.FAIL)
        if value is not None and (best is None or value < best):
            log.info("trial %d: new best %.4f ms (%s %s)", trial.number, value, variant.name, _fmt(tunables))
        with self.ledger.lock:
            self.ledger.observe(frozen)
        for cb in self.callbacks:
            cb(variant, tunables, m)
        return True

    def _look_ahead(self) -> None:
        """Before measuring this candidate, keep as many next ones queued as the backend prepares
        at once (at least one), so that it compiles them meanwhile. Only while tuning without an
        LLM: with one, what comes next is the proposer's call (and a replay must follow the
        recorded order)."""
        if not self.schedule.quiet():
            return
        ledger, depth = self.ledger, max(1, self.backend.prepares())
        with ledger.lock:
            while (ledger.waiting < depth
                   and ledger.used + ledger.running + ledger.waiting + 2 <= self.search.n_trials
                   and (ledger.propose_seed() or ledger.propose_tune())):
                pass

    def _postfix(self, bar: tqdm) -> None:
        best = self.ledger.best()
        parts = [f"best {best:.4g} ms" if best is not None else "best -"]
        proposer = self.schedule.proposer
        if proposer is not None:
            b = proposer.budget.summary()
            parts.append(f"LLM {b['calls']} calls {b['tokens']} tok ${b['cost_usd']:.2f}")
        fails = {**self.ledger.failures, **(proposer.failures if proposer else {})}
        if fails:
            parts.append("failed " + " ".join(f"{k}:{n}" for k, n in sorted(fails.items())))
        bar.set_postfix_str(", ".join(parts))


def _fmt(tunables: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in tunables.items())
