"""Numeric tuning of one variant's tunables, from that variant's own history.

Each variant gets a private in-memory Optuna study driven by the configured sampler. Tunables
are presented to it as ordinal indices into their sorted values, so TPE, CMA-ES and GP can
exploit order (64 < 128 < 256). The run's study in storage stays the record; this one is only
the sampler's view. A proposal that breaks a restriction or repeats a measured configuration
costs no budget: it is snapped to the nearest valid configuration not measured yet (in index
space, as Kernel Tuner's constraint-aware strategies do), which is measured and fed back as a
trial of its own, so the sampler keeps searching where it wanted to and learns from what was
measured there. An exhausted space is reported as such.

With ``climb`` on, the search first climbs: while the best configuration measured so far has
unmeasured neighbours (one step along one tunable), the proposal is snapped to the neighbour
nearest to it, so the sampler picks the direction and the step stays local. A run measures each
variant's default first, which the seed's author chose, so the climb starts from there; once the
best is a local optimum (every neighbour measured), proposals go wherever the sampler sends them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import optuna
from optuna.distributions import IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import Trial, TrialState

from evolve.kernel.spec import CandidateKey, LaunchSpec, candidate_key


class VariantTuner:
    def __init__(self, variant_id: str, spec: LaunchSpec, sampler: BaseSampler, seed: int | None,
                 climb: bool = True):
        self.variant_id = variant_id
        self.spec = spec
        self.climb = climb
        self.space = spec.space()
        self.dists = {t.name: IntDistribution(0, len(t.values) - 1) for t in spec.tunables}
        self.study = optuna.create_study(sampler=sampler, direction="minimize")
        self.results: dict[CandidateKey, float | None] = {}  # measured: value (ms) or None if failed
        self.pending: dict[CandidateKey, Trial | None] = {}  # proposed, not yet measured
        self._rng = random.Random(seed)

    @property
    def exhausted(self) -> bool:
        return len(self.results) + len(self.pending) >= len(self.space)

    @property
    def best(self) -> float | None:
        values = [v for v in self.results.values() if v is not None]
        return min(values) if values else None

    @property
    def n_measured(self) -> int:
        return len(self.results)

    def known(self, cfg: Mapping[str, int]) -> bool:
        k = candidate_key(self.variant_id, cfg)
        return k in self.results or k in self.pending

    def mark_pending(self, cfg: Mapping[str, int]) -> None:
        self.pending.setdefault(candidate_key(self.variant_id, cfg), None)

    def observe(self, cfg: Mapping[str, int], value: float | None) -> None:
        """Feed a measured configuration (value None: it failed)."""
        k = candidate_key(self.variant_id, cfg)
        trial = self.pending.pop(k, None)
        self.results[k] = value
        if trial is not None:
            self._tell(trial, value)
        else:
            self.study.add_trial(optuna.trial.create_trial(
                params=self._indices(cfg), distributions=self.dists,
                value=value, state=TrialState.COMPLETE if value is not None else TrialState.FAIL,
            ))

    def propose(self) -> dict[str, int] | None:
        """A configuration not measured or pending yet, or None when the space is exhausted."""
        if self.exhausted:
            return None
        trial = self.study.ask()
        cfg = {
            t.name: t.values[trial.suggest_int(t.name, 0, len(t.values) - 1)]
            for t in self.spec.tunables
        }
        neighbours = self._unseen_neighbours_of_best() if self.climb else []
        fresh = cfg in neighbours if neighbours else self.spec.is_valid(cfg) and not self.known(cfg)
        if fresh:
            self.pending[candidate_key(self.variant_id, cfg)] = trial
            return cfg
        k = candidate_key(self.variant_id, cfg)
        if k in self.results:  # a repeat: the sampler learns the known value again
            self._tell(trial, self.results[k])
        else:  # invalid, pending, or off the climb: measured where it was snapped to instead
            self.study.tell(trial, state=TrialState.FAIL)
        near = self._nearest(cfg, neighbours or [c for c in self.space if not self.known(c)])
        self.mark_pending(near)  # observed later as a trial of its own
        return near

    def _unseen_neighbours_of_best(self) -> list[dict[str, int]]:
        """Valid configurations neither measured nor pending, one index step from the best
        measured one along one tunable ([] before any success), in the space's order so that a
        seeded tie-break picks the same one whichever way they were found."""
        done = [(v, k) for k, v in self.results.items() if v is not None]
        if not done:
            return []
        best = dict(min(done)[1][1])
        near = []
        for t in self.spec.tunables:
            i = t.values.index(best[t.name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(t.values):
                    cfg = {u.name: t.values[j] if u is t else best[u.name] for u in self.spec.tunables}
                    if self.spec.is_valid(cfg) and not self.known(cfg):
                        near.append(cfg)
        return sorted(near, key=lambda c: list(self._indices(c).values()))  # the space's order

    def _nearest(self, cfg: Mapping[str, int], among: list[dict[str, int]]) -> dict[str, int]:
        """The configuration of ``among`` closest to ``cfg`` in index space, ties broken at random."""
        want = self._indices(cfg)
        dist = [self._distance(c, want) for c in among]
        best = min(dist)
        return self._rng.choice([c for c, d in zip(among, dist, strict=True) if d == best])

    def _distance(self, cfg: Mapping[str, int], indices: Mapping[str, int]) -> int:
        """L1 distance in index space between a configuration and a point given as indices."""
        return sum(abs(i - indices[n]) for n, i in self._indices(cfg).items())

    def _tell(self, trial: Trial, value: float | None) -> None:
        if value is None:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, value)

    def _indices(self, cfg: Mapping[str, int]) -> dict[str, int]:
        return {t.name: t.values.index(cfg[t.name]) for t in self.spec.tunables}
