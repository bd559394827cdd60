"""The search loop: Optuna owns the budget and the record, the backend measures.

One study per run. Every candidate is one trial, proposed by enqueueing it (a WAITING trial
that carries its variant) and evaluated by popping it with ``ask``; the two halves meet only
in the storage, so a resumed run, or another process, continues where the last one stopped.
Failed candidates are FAIL trials with their reason, so the budget and the dashboard see them.
"""

from __future__ import annotations

import logging
import math
import sys
import tempfile
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
from evolve.hardware import Hardware
from evolve.measurement import Measurement, Status
from evolve.metrics import roofline
from evolve.objective import Objective
from evolve.samplers import make_sampler
from evolve.spec import Variant
from evolve.task import Task
from evolve.tuner import VariantTuner
from evolve.variants import VariantStore

log = logging.getLogger(__name__)
ORIGIN_ATTRS = ("variant", "variant_name", "operator", "parents")  # set when a trial is enqueued
Callback = Callable[[Variant, Mapping[str, int], Measurement], None]


@dataclass(frozen=True)
class SearchSettings:
    sampler: str = "tpe"
    n_trials: int = 100
    timeout_s: float | None = None  # search time summed over resumes
    seed: int | None = None
    explore: float = 0.5  # how much fewer trials lower a variant's bar (LCB on its best time)
    progress: bool = True

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> SearchSettings:
        return cls(
            sampler=str(cfg.get("sampler", "tpe")),
            n_trials=int(cfg.get("n_trials", 100)),
            timeout_s=None if cfg.get("timeout") is None else float(cfg["timeout"]),
            seed=None if cfg.get("seed") is None else int(cfg["seed"]),
            explore=float(cfg.get("explore", 0.5)),
            progress=bool(cfg.get("progress", True)),
        )


def counts_toward_budget(t: FrozenTrial) -> bool:
    """Finished trials count; one cut short by an interrupt is retried instead."""
    return t.state in (TrialState.COMPLETE, TrialState.FAIL) and (
        t.user_attrs.get("status") != Status.INTERRUPTED.value
    )


class Search:
    def __init__(self, study: optuna.Study, variants: VariantStore, backend: Backend, task: Task,
                 objective: Objective, hardware: Hardware, settings: SearchSettings,
                 callbacks: Iterable[Callback] = ()):
        self.study, self.variants, self.backend = study, variants, backend
        self.task, self.objective, self.hw, self.s = task, objective, hardware, settings
        self.callbacks = list(callbacks)
        self.tuners: dict[str, VariantTuner] = {}
        self.seed_ids: list[str] = []
        self.failures: dict[str, int] = {}

    # ---- setup ------------------------------------------------------------------------
    def add_seeds(self, seeds: Iterable[Variant]) -> None:
        for v in seeds:
            self.variants.add(v, operator="seed", parents=[])
            self.seed_ids.append(v.id)

    def _tuner(self, vid: str) -> VariantTuner:
        if vid not in self.tuners:
            v = self.variants.get(vid)
            self.tuners[vid] = VariantTuner(
                vid, v.spec, make_sampler(self.s.sampler, self.s.seed), self.s.seed
            )
        return self.tuners[vid]

    def _restore(self) -> tuple[int, int]:
        """Rebuild the tuners from the record; fail and re-queue trials a dead run left RUNNING."""
        used = waiting = 0
        for t in self.study.get_trials(deepcopy=False):
            vid = t.user_attrs.get("variant")
            if vid not in self.variants:
                continue
            if t.state == TrialState.RUNNING:
                params = t.system_attrs.get("fixed_params") or t.params
                self._requeue(Trial(self.study, t._trial_id), t.user_attrs, params)
                self._tuner(vid).mark_pending(params)
                waiting += 1
            elif t.state == TrialState.WAITING:
                self._tuner(vid).mark_pending(t.system_attrs.get("fixed_params", {}))
                waiting += 1
            elif counts_toward_budget(t):
                used += 1
                self._tuner(vid).observe(t.params, t.value if t.state == TrialState.COMPLETE else None)
                if t.state == TrialState.FAIL:
                    status = t.user_attrs.get("status", "?")
                    self.failures[status] = self.failures.get(status, 0) + 1
        return used, waiting

    # ---- loop -------------------------------------------------------------------------
    def run(self) -> str:
        """Search until the budget, the time limit or the space runs out; say which."""
        used, waiting = self._restore()
        elapsed = float(self.study.user_attrs.get("elapsed_s", 0.0))
        bar = tqdm(total=self.s.n_trials, initial=min(used, self.s.n_trials), unit="trial",
                   desc=self.study.study_name, dynamic_ncols=True,
                   disable=not (self.s.progress and sys.stderr.isatty()))
        self._postfix(bar)
        reason = "budget"
        with logging_redirect_tqdm(), bar:
            while used < self.s.n_trials:
                if self.s.timeout_s is not None and elapsed >= self.s.timeout_s:
                    reason = "timeout"
                    break
                t0 = time.monotonic()
                if waiting:
                    waiting -= 1
                elif not self._propose():
                    reason = "exhausted"
                    break
                self._evaluate_next()
                used += 1
                elapsed += time.monotonic() - t0
                self.study.set_user_attr("elapsed_s", elapsed)
                bar.update()
                self._postfix(bar)
        return reason

    def _propose(self) -> bool:
        """Enqueue the next candidate: every seed's default first, then tune the most promising."""
        for vid in self.seed_ids:
            v = self.variants.get(vid)
            if not self._tuner(vid).known(v.spec.default):
                self._enqueue(v, v.spec.default, "seed")
                return True
        active = [v for v in self.variants if not self._tuner(v.id).exhausted]
        while active:
            v = min(active, key=lambda v: self._score(v.id))
            cfg = self._tuner(v.id).propose()
            if cfg is not None:
                self._enqueue(v, cfg, "tune")
                return True
            active.remove(v)
        return False

    def _score(self, vid: str) -> float:
        """Lower confidence bound on the variant's best time: few trials, more optimism."""
        tuner = self._tuner(vid)
        if tuner.best is None:
            return math.inf
        return tuner.best * (1 - self.s.explore / math.sqrt(1 + tuner.n_measured))

    def _enqueue(self, v: Variant, cfg: Mapping[str, int], operator: str) -> None:
        self._tuner(v.id).mark_pending(cfg)
        self.study.enqueue_trial(dict(cfg), user_attrs={
            "variant": v.id, "variant_name": v.name, "operator": operator,
            "parents": self.variants.meta[v.id]["parents"] if operator == "seed" else [v.id],
        })

    def _evaluate_next(self) -> None:
        trial = self.study.ask()
        attrs = trial.user_attrs
        vid = attrs.get("variant")
        if vid not in self.variants:
            trial.set_user_attr("status", Status.REJECTED.value)
            trial.set_user_attr("reason", "trial carries no known variant")
            self.study.tell(trial, state=TrialState.FAIL)
            return
        variant = self.variants.get(vid)
        tunables = {
            t.name: trial.suggest_int(t.name, t.values[0], t.values[-1]) for t in variant.spec.tunables
        }
        try:
            m = self.backend.evaluate(variant, tunables, self.objective.sizes(self.task))
        except KeyboardInterrupt:
            self._requeue(trial, attrs, tunables)
            raise
        value = self.objective.value_ms(m, self.task) if m.ok else None
        self._record(trial, variant, tunables, m)
        if value is None:
            self.study.tell(trial, state=TrialState.FAIL)
            self.failures[m.status.value] = self.failures.get(m.status.value, 0) + 1
        else:
            best = self._best()
            self.study.tell(trial, value)
            if best is None or value < best:
                log.info("trial %d: new best %.4f ms (%s %s)", trial.number, value, variant.name,
                         _fmt(tunables))
        self._tuner(vid).observe(tunables, value)
        for cb in self.callbacks:
            cb(variant, tunables, m)

    def _requeue(self, trial: Trial, attrs: Mapping[str, Any], tunables: Mapping[str, int]) -> None:
        """Close an interrupted trial without charging the budget and queue its candidate again."""
        trial.set_user_attr("status", Status.INTERRUPTED.value)
        self.study.tell(trial, state=TrialState.FAIL)
        origin = {k: attrs[k] for k in ORIGIN_ATTRS if k in attrs}
        self.study.enqueue_trial(dict(tunables), user_attrs=origin)

    def _record(self, trial: Trial, variant: Variant, tunables: Mapping[str, int],
                m: Measurement) -> None:
        trial.set_user_attr("status", m.status.value)
        if m.reason:
            trial.set_user_attr("reason", m.reason[:2000])
        trial.set_user_attr("eval_s", round(m.time_s, 3))
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
        fails = sum(self.failures.values())
        bar.set_postfix_str(
            (f"best {best:.4g} ms" if best is not None else "best -") + (f", {fails} failed" if fails else "")
        )


def _fmt(tunables: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in tunables.items())
