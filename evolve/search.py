"""The search loop: Optuna owns the budget and the record, the backend measures.

One study per run. Every candidate is one trial, proposed by enqueueing it (a WAITING trial
that carries its variant) and evaluated by popping it with ``ask``; the two halves meet only
in the storage, so a resumed run, or another process, continues where the last one stopped.
Failed candidates are FAIL trials with their reason, so the budget and the dashboard see them.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import upload_artifact
from optuna.trial import FrozenTrial, Trial, TrialState
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from evolve.backends import Backend
from evolve.errors import EvolveError
from evolve.evolution import LLM_OPERATORS, REPAIRABLE, EvolutionSettings, Proposer
from evolve.hardware import Hardware
from evolve.measurement import NOT_COUNTED, Measurement, Status
from evolve.metrics import roofline
from evolve.objective import Objective
from evolve.population import Population
from evolve.samplers import make_sampler
from evolve.spec import Variant, candidate_key
from evolve.task import Task
from evolve.tuner import VariantTuner
from evolve.variants import VariantStore, requeue

log = logging.getLogger(__name__)
ROLES = ("all", "propose", "evaluate")
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # which evaluator measured a trial
HEARTBEAT = "evolve:heartbeat"  # trial system attribute: when its evaluator last said it was alive
MAX_BLIND_TRIES = 2  # configurations tried of a variant that has never produced a correct result
Callback = Callable[[Variant, Mapping[str, int], Measurement], None]


@dataclass(frozen=True)
class SearchSettings:
    sampler: str = "tpe"
    climb: bool = True  # each variant: neighbours of its best first, then the sampler's picks
    n_trials: int = 100
    timeout_s: float | None = None  # search time summed over resumes
    seed: int | None = None
    explore: float = 0.5  # how much fewer trials lower a variant's bar (LCB on its best time)
    progress: bool = True
    heartbeat_s: float = 10.0  # a measuring evaluator marks its trial alive this often ...
    stale_after_s: float = 60.0  # ... and a RUNNING trial silent for this long is re-queued

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> SearchSettings:
        return cls(
            sampler=str(cfg.get("sampler", "tpe")),
            climb=bool(cfg.get("climb", True)),
            n_trials=int(cfg.get("n_trials", 100)),
            timeout_s=None if cfg.get("timeout") is None else float(cfg["timeout"]),
            seed=None if cfg.get("seed") is None else int(cfg["seed"]),
            explore=float(cfg.get("explore", 0.5)),
            progress=bool(cfg.get("progress", True)),
            heartbeat_s=float(cfg.get("heartbeat_s", 10.0)),
            stale_after_s=float(cfg.get("stale_after_s", 60.0)),
        )


def counts_toward_budget(t: FrozenTrial) -> bool:
    """Finished trials count; one cut short by an interrupt is retried instead, and one another
    process queued beyond the budget (or twice) was never measured."""
    return t.state in (TrialState.COMPLETE, TrialState.FAIL) and t.user_attrs.get("status") not in NOT_COUNTED


def _fixed(t: FrozenTrial) -> dict[str, Any]:
    return dict(t.system_attrs.get("fixed_params") or t.params)


class Search:
    """The evaluator side of a run, and the record keeper the LLM proposer commits through.

    All state changes (registering variants, queueing trials, feeding results to the tuners and
    the population) happen under ``lock``, so a proposer thread always sees a consistent record.
    """

    def __init__(self, study: optuna.Study, variants: VariantStore, backend: Backend, task: Task,
                 objective: Objective, hardware: Hardware, settings: SearchSettings,
                 callbacks: Iterable[Callback] = (), evolution: EvolutionSettings | None = None,
                 role: str = "all"):
        if role not in ROLES:
            raise EvolveError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        self.role = role
        self.study, self.variants, self.backend = study, variants, backend
        self.task, self.objective, self.hw, self.s = task, objective, hardware, settings
        self.evo = evolution or EvolutionSettings()
        self.callbacks = list(callbacks)
        self.lock = threading.RLock()
        self.tuners: dict[str, VariantTuner] = {}
        self.seed_ids: list[str] = []
        self.failures: dict[str, int] = {}
        self.population = Population(
            self.evo.islands, self.evo.capacity, self.evo.elite, self.evo.migrate_every,
            self.evo.novelty, source=lambda vid: self.variants.get(vid).source,
        )
        self.proposer: Proposer | None = None
        self.replay: list[dict[str, Any]] | None = None  # a recorded proposal schedule to follow
        self._held: list[tuple[dict[str, Any], Any]] = []
        self.used = 0  # finished trials that count toward the budget
        self.enqueued = 0  # candidates queued by proposals, over the whole study
        self.waiting = 0  # of them, not yet evaluated
        self.inflight = 0  # LLM proposals planned and not yet committed (each may bring a child)
        self.credits = 0  # tuning trials allowed before the next LLM child
        self._observed: set[int] = set()  # trial numbers already fed to tuners and population
        self._last_work = time.monotonic()
        self._last_reap = 0.0
        self.running_elsewhere = 0  # RUNNING trials of other evaluators (role=evaluate)
        self.repairable: list[tuple[str, str, str, str]] = []  # (variant, status, reason, diagnostics)
        self.recent_failures: list[tuple[str, str, str]] = []  # (name, status, reason)

    # ---- setup ------------------------------------------------------------------------
    def add_seeds(self, seeds: Iterable[Variant]) -> None:
        for i, v in enumerate(seeds):
            self.variants.add(v, operator="seed", parents=[], island=i % self.evo.islands)
            self.seed_ids.append(v.id)

    def _tuner(self, vid: str) -> VariantTuner:
        if vid not in self.tuners:
            v = self.variants.get(vid)
            self.tuners[vid] = VariantTuner(
                vid, v.spec, make_sampler(self.s.sampler, self.s.seed), self.s.seed, self.s.climb
            )
        return self.tuners[vid]

    def _restore(self) -> int:
        """Rebuild tuners and population from the record; re-queue what a dead run left RUNNING."""
        used = 0
        trials = sorted(self.study.get_trials(deepcopy=False), key=lambda t: t.number)
        for t in trials:
            vid = t.user_attrs.get("variant")
            if vid not in self.variants:
                continue
            if t.state == TrialState.RUNNING and self.role != "all":  # measured elsewhere, or stale:
                self._tuner(vid).mark_pending(t.system_attrs.get("fixed_params") or t.params)
                self.waiting += self.role == "propose"  # the heartbeats tell (see _reap)
                self.enqueued += 1
            elif t.state == TrialState.RUNNING:
                params = _fixed(t)
                requeue(self.study, t._trial_id)
                self._tuner(vid).mark_pending(params)
                self.waiting += 1
                self.enqueued += 1
            elif t.state == TrialState.WAITING:
                self._tuner(vid).mark_pending(t.system_attrs.get("fixed_params", {}))
                self.waiting += 1
                self.enqueued += 1
            elif counts_toward_budget(t):
                used += 1
                self.enqueued += 1
                self._observe(t)
        repaired = {p for m in self.variants.meta.values() if m["operator"] == "repair" for p in m["parents"]}
        self.repairable = [r for r in self.repairable if r[0] not in repaired]
        return used

    def _observe(self, t: FrozenTrial) -> None:
        """Feed one finished trial to the tuner, the population and the failure lists."""
        self._observed.add(t.number)
        vid = t.user_attrs["variant"]
        meta = self.variants.meta[vid]
        tuner = self._tuner(vid)
        first = tuner.n_measured == 0
        tuner.observe(t.params, t.value if t.state == TrialState.COMPLETE else None)
        self.population.observe(t, meta.get("island", 0))
        if self.proposer is not None:
            self.proposer.idle = False
        op = t.user_attrs.get("operator")
        if op == "tune":
            self.credits -= 1
        elif first and op in ("seed", *LLM_OPERATORS):
            self.credits += self.evo.tune_per_child
        if t.state == TrialState.FAIL:
            status = t.user_attrs.get("status", "?")
            self.failures[status] = self.failures.get(status, 0) + 1
            if first and op in LLM_OPERATORS:
                reason = str(t.user_attrs.get("reason", ""))
                self.recent_failures.append((meta["name"], status, reason))
                if status in REPAIRABLE and op != "repair":
                    self.repairable.append((vid, status, reason, str(t.user_attrs.get("diagnostics", ""))))

    # ---- loop -------------------------------------------------------------------------
    def run(self) -> str:
        """Search until the budget, the time limit or the space runs out; say which."""
        self.used = self._restore()
        elapsed = float(self.study.user_attrs.get("elapsed_s", 0.0))
        bar = tqdm(total=self.s.n_trials, initial=min(self.used, self.s.n_trials), unit="trial",
                   desc=self.study.study_name, dynamic_ncols=True,
                   disable=not (self.s.progress and sys.stderr.isatty()))
        self._postfix(bar)
        stop = threading.Event()
        threads = []
        if self.proposer is not None and self.evo.overlap and self.replay is None:
            threads = [threading.Thread(target=self.proposer.run, args=(stop,), daemon=True,
                                        name=f"evolve-proposer-{i}") for i in range(self.proposer.threads)]
            for th in threads:
                th.start()
        reason = "budget"
        try:
            with logging_redirect_tqdm(), bar:
                while self.used < self.s.n_trials:
                    if self.s.timeout_s is not None and elapsed >= self.s.timeout_s:
                        reason = "timeout"
                        break
                    t0 = time.monotonic()
                    action = self._next()
                    if action == "wait":
                        time.sleep(0.05)
                    elif action == "propose":
                        assert self.proposer is not None
                        self.proposer.run_once()
                    elif action == "exhausted":
                        reason = "exhausted"
                        break
                    elif self._evaluate_next():
                        self.used += 1
                        bar.update()
                    elapsed += time.monotonic() - t0
                    self.study.set_user_attr("elapsed_s", elapsed)
                    self._postfix(bar)
        finally:
            stop.set()
            for th in threads:  # a call in flight is abandoned after a short wait (Ctrl-C)
                th.join(timeout=2.0)
        if self.role == "evaluate":
            self._drain()
        return reason

    def _drain(self) -> None:
        """Before leaving, re-queue the trials of evaluators that died, so none stays RUNNING."""
        deadline = time.monotonic() + self.s.stale_after_s + 2 * self.s.heartbeat_s
        self._pull()
        while self.running_elsewhere and time.monotonic() < deadline:
            time.sleep(self.s.heartbeat_s)
            self._reap()
            self._pull()

    def llm_active(self) -> bool:
        if self.role == "evaluate":  # the LLM works in another process: is it alive?
            state = self.study.user_attrs.get("proposer") or {}
            return state.get("state") == "running" and time.time() - state.get("heartbeat", 0) < 60
        return self.proposer is not None and self.proposer.stopped is None

    def _pull(self) -> None:
        """Catch up with what other processes put in the storage: their variants, the results
        of their trials (for tuners and population) and what is queued or being measured."""
        self.variants.load()
        trials = sorted(self.study.get_trials(deepcopy=False), key=lambda t: t.number)
        with self.lock:
            for t in trials:
                vid = t.user_attrs.get("variant")
                if t.number in self._observed or vid not in self.variants:
                    continue
                if counts_toward_budget(t):
                    self._observe(t)
                elif t.state in (TrialState.WAITING, TrialState.RUNNING):
                    self._tuner(vid).mark_pending(_fixed(t))
            self.used = sum(counts_toward_budget(t) for t in trials)
            busy = [TrialState.WAITING] + [TrialState.RUNNING] * (self.role == "propose")
            self.waiting = sum(t.state in busy for t in trials)
            self.running_elsewhere = sum(t.state == TrialState.RUNNING for t in trials)

    def run_proposer(self) -> str:
        """``role=propose``: make LLM children for evaluators elsewhere until a budget is spent."""
        assert self.proposer is not None
        self.used = self._restore()
        beat, reason = 0.0, "budget"
        try:
            while True:
                if time.monotonic() - beat > 5:
                    self.study.set_user_attr("proposer", {"state": "running", "heartbeat": time.time()})
                    beat = time.monotonic()
                self._pull()
                if self.proposer.spent():
                    reason = str(self.proposer.stopped)
                    break
                if self.used >= self.s.n_trials:
                    break
                with self.lock:
                    busy = self.waiting >= self.evo.max_pending or self.budget_full()
                    plan = None if busy else self.proposer.plan()
                if plan is None:
                    time.sleep(0.2)
                    continue
                outcome = self.proposer.ask(plan)
                with self.lock:
                    self.proposer.commit(plan, *outcome)
        finally:
            self.study.set_user_attr("proposer", {"state": "done", "reason": reason})
        return reason

    def _next(self) -> str:
        """What the evaluator does next: evaluate a queued candidate, propose, wait or stop."""
        if self.role == "evaluate":
            if time.monotonic() - self._last_reap > self.s.heartbeat_s:
                self._reap()
                self._last_reap = time.monotonic()
            self._pull()
        with self.lock:
            if self.replay is not None:
                self._follow_replay()
            if self.waiting:
                return self._take()
            if self._propose_seed():
                return self._take()
            if self.replay is not None:
                # between recorded children, tune as the original run did; if the record runs
                # out of configurations first (it diverged), take the next child early
                if self._propose_tune():
                    return self._take()
                while self._held and not self.waiting:
                    self._commit_held(force=True)
                return self._take() if self.waiting else "exhausted"
            if self.inflight and self.used + self.waiting + self.inflight >= self.s.n_trials:
                return "wait"  # the rest of the budget is reserved for children on their way
            if self.role == "evaluate" and self.used + self.running_elsewhere >= self.s.n_trials:
                return "wait"  # the rest of the budget is being measured by other evaluators
            llm = self.llm_active() and not self.budget_full()
            if (not llm or self.credits > 0) and self._propose_tune():
                return self._take()
            if llm and self.role == "evaluate":
                return "wait"  # for the proposer process's next child
            if llm and self.proposer is not None and not self.proposer.idle:
                return "wait" if self.evo.overlap else "propose"
            # the LLM is done or has nothing to work on yet: tune whatever is left
            if self._propose_tune():
                return self._take()
            if self.inflight or self._may_get_work():
                return "wait"
            return "exhausted"

    def _may_get_work(self) -> bool:
        """An evaluator beside a proposer process waits a while for children before giving up."""
        if self.role != "evaluate":
            return False
        if self.running_elsewhere:  # finished, or re-queued once its evaluator goes silent
            return True
        state = (self.study.user_attrs.get("proposer") or {}).get("state")
        return state != "done" and time.monotonic() - self._last_work < self.evo.idle_wait_s

    def budget_full(self) -> bool:
        return self.used + self.waiting + self.inflight >= self.s.n_trials

    def _take(self) -> str:
        self.waiting -= 1
        self._last_work = time.monotonic()
        return "evaluate"

    def _follow_replay(self) -> None:
        """Make each recorded proposal when the record is where it was originally made."""
        assert self.replay is not None and self.proposer is not None
        while self.replay and self.replay[0]["seen"] <= self.population.observed:
            entry = self.replay.pop(0)
            plan = self.proposer.plan()
            reason = entry.get("reason") or ""
            outcome = None if plan is None else self.proposer.ask(
                plan, turns=len(entry["calls"]), then=reason if reason.startswith("llm_budget") else None)
            self._held.append((entry, (plan, outcome)))
        self._commit_held(force=False)

    def _commit_held(self, force: bool) -> None:
        assert self.proposer is not None
        for item in list(self._held):
            entry, (plan, outcome) = item
            if plan is None or outcome is None:
                self._held.remove(item)
            elif force or entry["after"] <= self.enqueued:
                self._held.remove(item)
                self.proposer.commit(plan, *outcome)
                if force:
                    return

    def _propose_seed(self) -> bool:
        for vid in self.seed_ids:
            v = self.variants.get(vid)
            if not self._tuner(vid).known(v.spec.default):
                self.enqueue(v, v.spec.default, "seed", parents=self.variants.meta[vid]["parents"])
                return True
        return False

    def _propose_tune(self) -> bool:
        """Queue the next configuration of the most promising variant that has one left."""
        active = [v for v in self.variants if self._tunable(v.id)]
        while active:
            v = min(active, key=lambda v: self._score(v.id))
            cfg = self._tuner(v.id).propose()
            if cfg is not None:
                self.enqueue(v, cfg, "tune", parents=[v.id])
                return True
            active.remove(v)
        return False

    def _tunable(self, vid: str) -> bool:
        """Configurations left, and not a variant that failed twice without ever working."""
        tuner = self._tuner(vid)
        return not tuner.exhausted and (tuner.best is not None or tuner.n_measured < MAX_BLIND_TRIES)

    def _score(self, vid: str) -> float:
        """Lower confidence bound on the variant's best time: few trials, more optimism."""
        tuner = self._tuner(vid)
        if tuner.best is None:
            return math.inf
        return tuner.best * (1 - self.s.explore / math.sqrt(1 + tuner.n_measured))

    def enqueue(self, v: Variant, cfg: Mapping[str, int], operator: str, parents: list[str],
                extra: Mapping[str, Any] | None = None) -> None:
        """Queue a candidate as a WAITING trial that carries its variant (call under ``lock``)."""
        self._tuner(v.id).mark_pending(cfg)
        self.study.enqueue_trial(dict(cfg), user_attrs={
            "variant": v.id, "variant_name": v.name, "operator": operator, "parents": parents,
            **(extra or {}),
        })
        self.enqueued += 1
        self.waiting += 1
        if self.backend is not None:
            self.backend.prefetch(v, cfg)

    def _evaluate_next(self) -> bool:
        """Measure the next queued trial; False if it was not ours to measure (budget, twin)."""
        trial = self.study.ask()
        self._heartbeat_id(trial._trial_id)
        trial.set_user_attr("worker", WORKER)
        attrs = trial.user_attrs
        vid = attrs.get("variant")
        if vid is None:  # Optuna made a fresh trial: the queue was emptied by another evaluator
            trial.set_user_attr("status", Status.NO_CANDIDATE.value)
            self.study.tell(trial, state=TrialState.FAIL)
            return False
        if vid not in self.variants:
            self.variants.load()  # made by another process since we last looked
        if vid not in self.variants:
            trial.set_user_attr("status", Status.REJECTED.value)
            trial.set_user_attr("reason", "trial carries no known variant")
            self.study.tell(trial, state=TrialState.FAIL)
            return True
        variant = self.variants.get(vid)
        fixed = _fixed(self.study._storage.get_trial(trial._trial_id))
        if self.role == "evaluate" and (skip := self._not_ours(trial._trial_id, vid, fixed)):
            trial.set_user_attr("status", skip.value)
            self.study.tell(trial, state=TrialState.FAIL)
            return False
        tunables = {
            t.name: trial.suggest_int(t.name, t.values[0], t.values[-1]) for t in variant.spec.tunables
        }
        self._look_ahead()
        beating = threading.Event()
        beat = threading.Thread(target=self._beat, args=(trial, beating), daemon=True)
        beat.start()
        try:
            m = self.backend.evaluate(variant, tunables, self.objective.sizes(self.task))
        except KeyboardInterrupt:
            requeue(self.study, trial._trial_id)
            raise
        finally:
            beating.set()
        value = self.objective.value_ms(m, self.task) if m.ok else None
        self._record(trial, variant, tunables, m)
        best = self._best()
        frozen = self.study.tell(trial, value) if value is not None else self.study.tell(
            trial, state=TrialState.FAIL)
        if value is not None and (best is None or value < best):
            log.info("trial %d: new best %.4f ms (%s %s)", trial.number, value, variant.name, _fmt(tunables))
        with self.lock:
            self._observe(frozen)
        for cb in self.callbacks:
            cb(variant, tunables, m)
        return True

    def _look_ahead(self) -> None:
        """Before measuring this candidate, keep as many next ones queued as the backend prepares
        at once (at least one), so that it compiles them meanwhile. Only while tuning without an
        LLM: with one, what comes next is the proposer's call (and a replay must follow the
        recorded order)."""
        if self.proposer is not None or self.replay is not None or self.llm_active():
            return
        depth = max(1, self.backend.prepares()) if self.backend is not None else 1
        with self.lock:
            while (self.waiting < depth
                   and self.used + self.running_elsewhere + self.waiting + 2 <= self.s.n_trials
                   and (self._propose_seed() or self._propose_tune())):
                pass

    def _not_ours(self, trial_id: int, vid: str, params: Mapping[str, Any]) -> Status | None:
        """With several evaluators: the budget is the first ``n_trials`` trials in the order they
        were created (those not excluded), and a candidate is measured by whoever holds its first
        trial. Creation order is the storage's trial id: trial numbers can tie or swap when
        processes create trials at the same moment."""
        while True:
            earlier = [t for t in self.study.get_trials(deepcopy=False)
                       if t._trial_id < trial_id and t.user_attrs.get("status") not in NOT_COUNTED]
            if len(earlier) < self.s.n_trials:
                break
            running = sum(t.state == TrialState.RUNNING for t in earlier)
            if len(earlier) - running >= self.s.n_trials or not running:
                return Status.OVER_BUDGET
            # an earlier trial still measuring may yet be cut (its evaluator dies): wait and see
            self._heartbeat_id(trial_id)
            time.sleep(min(self.s.heartbeat_s, 0.5))
            self._reap()
        key = candidate_key(vid, params)
        if any(candidate_key(t.user_attrs.get("variant", ""), _fixed(t)) == key for t in earlier):
            return Status.DUPLICATE
        return None

    def _heartbeat_id(self, trial_id: int) -> None:
        self.study._storage.set_trial_system_attr(trial_id, HEARTBEAT, time.time())

    def _beat(self, trial: Trial, stop: threading.Event) -> None:
        """While measuring: tell other processes this trial is alive (see ``_reap``). A system
        attribute rather than Optuna's heartbeat, which only RDB storages have."""
        while not stop.wait(self.s.heartbeat_s):
            self._heartbeat_id(trial._trial_id)

    def _reap(self) -> int:
        """Re-queue RUNNING trials whose evaluator stopped beating (killed, machine lost)."""
        now, stale = time.time(), 0
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if now - float(t.system_attrs.get(HEARTBEAT, now)) > self.s.stale_after_s:
                stale += requeue(self.study, t._trial_id)
        if stale:
            log.warning("re-queued %d trial(s) whose evaluator stopped (no heartbeat for %.0f s)",
                        stale, self.s.stale_after_s)
        return stale

    def _record(self, trial: Trial, variant: Variant, tunables: Mapping[str, int],
                m: Measurement) -> None:
        trial.set_user_attr("status", m.status.value)
        if m.reason:
            trial.set_user_attr("reason", m.reason[:2000])
        if m.log:
            trial.set_user_attr("diagnostics", m.log[:4000])
        trial.set_user_attr("eval_s", round(m.time_s, 3))
        trial.set_user_attr("compile_s", round(m.compile_s, 3))
        trial.set_user_attr("check_s", round(m.check_s, 3))
        if m.ok:
            for k, v in roofline(m, self.task, self.hw).items():
                trial.set_user_attr(k, round(v, 6))
            timing = next(iter(m.timings.values()))
            trial.set_user_attr("iqr_ms", round(timing.iqr_s * 1e3, 6))
            trial.set_user_attr("samples", timing.n)
        if m.resources:
            trial.set_user_attr("registers", max(r["registers"] for r in m.resources.values()))
            trial.set_user_attr("local_bytes", max(r["local_bytes"] for r in m.resources.values()))
            trial.set_user_attr("occupancy", round(min(r["occupancy"] for r in m.resources.values()), 3))
        with tempfile.TemporaryDirectory() as tmp:
            files = {f"{variant.name}.cu": variant.with_defines(tunables)}
            if m.log:
                files["compile.log"] = m.log
            for name, text in files.items():
                path = Path(tmp) / name
                path.write_text(text)
                upload_artifact(artifact_store=self.variants.artifacts, file_path=str(path),
                                study_or_trial=trial, mimetype="text/plain", encoding="utf-8")

    def _best(self) -> float | None:
        values = [t.best for t in self.tuners.values() if t.best is not None]
        return min(values) if values else None

    def _postfix(self, bar: tqdm) -> None:
        best = self._best()
        parts = [f"best {best:.4g} ms" if best is not None else "best -"]
        if self.proposer is not None:
            b = self.proposer.budget.summary()
            parts.append(f"LLM {b['calls']} calls {b['tokens']} tok ${b['cost_usd']:.2f}")
        fails = {**self.failures, **(self.proposer.failures if self.proposer else {})}
        if fails:
            parts.append("failed " + " ".join(f"{k}:{n}" for k, n in sorted(fails.items())))
        bar.set_postfix_str(", ".join(parts))


def _fmt(tunables: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in tunables.items())
