"""The population the LLM operators draw parents from: islands, elitism, novelty, migration.

It is a pure function of the finished trials in order (plus each variant's island), so a
resumed run, a replay and another process all see the same population. A variant joins its
island when it has a correct measurement and there is room, or when it beats the island's
worst member by more than the measured noise; the island's best members (``elite``) are never
displaced. Every ``migrate_every`` finished trials, each island's best is copied to the next.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from evolve.kernel.spec import normalize_source
from evolve.record.schema import Attr

_TOKEN = re.compile(r"\w+|[^\s\w]")


@dataclass
class Member:
    vid: str
    best_ms: float
    iqr_ms: float
    best: FrozenTrial  # the variant's fastest trial: its tunables and measurements
    n_ok: int


def noise_ms(a: Member, b: Member) -> float:
    """Differences smaller than this are not improvements: twice the summed IQRs."""
    return 2.0 * (a.iqr_ms + b.iqr_ms)


class Population:
    def __init__(self, n_islands: int, capacity: int, elite: int, migrate_every: int,
                 novelty: float, source: Callable[[str], str]):
        self.islands: list[list[str]] = [[] for _ in range(max(1, n_islands))]
        self.capacity, self.elite = max(1, capacity), max(0, elite)
        self.migrate_every, self.novelty = migrate_every, novelty
        self.members: dict[str, Member] = {}
        self.observed = 0  # finished trials seen, in order
        self._source = source
        self._tokens: dict[str, set[str]] = {}

    # ---- building -------------------------------------------------------------------
    def observe(self, trial: FrozenTrial, island: int | None) -> None:
        """Feed the next finished trial (in trial-number order)."""
        self.observed += 1
        vid = trial.user_attrs.get(Attr.VARIANT)
        if trial.state == TrialState.COMPLETE and vid is not None and island is not None:
            m = self.members.get(vid)
            iqr = float(trial.user_attrs.get(Attr.IQR_MS, 0.0))
            if m is None:
                m = self.members[vid] = Member(vid, trial.value, iqr, trial, 0)
            elif trial.value < m.best_ms:
                m.best_ms, m.iqr_ms, m.best = trial.value, iqr, trial
            m.n_ok += 1
            self._insert(island % len(self.islands), vid)
        if self.migrate_every and self.observed % self.migrate_every == 0:
            self._migrate()

    def _ranked(self, island: int) -> list[str]:
        return sorted(self.islands[island], key=lambda v: (self.members[v].best_ms, v))

    def _insert(self, island: int, vid: str) -> None:
        members = self.islands[island]
        if vid in members:
            return
        if len(members) < self.capacity:
            members.append(vid)
            return
        ranked = self._ranked(island)
        replaceable = ranked[self.elite:]
        if not replaceable:
            return
        worst = self.members[replaceable[-1]]
        new = self.members[vid]
        if new.best_ms < worst.best_ms - noise_ms(new, worst):
            members[members.index(worst.vid)] = vid

    def _migrate(self) -> None:
        bests = [self._ranked(i)[0] if self.islands[i] else None for i in range(len(self.islands))]
        for i, vid in enumerate(bests):
            if vid is not None and len(self.islands) > 1:
                self._insert((i + 1) % len(self.islands), vid)

    # ---- reading --------------------------------------------------------------------
    def best(self) -> Member | None:
        return min(self.members.values(), key=lambda m: m.best_ms, default=None)

    def nonempty_islands(self) -> list[int]:
        return [i for i, m in enumerate(self.islands) if m]

    def select(self, island: int, rng: random.Random, exclude: Sequence[str] = ()) -> str | None:
        """A parent: fast ones more likely (rank-based), novel ones more likely (novelty term)."""
        ranked = [v for v in self._ranked(island) if v not in exclude]
        if not ranked:
            return None
        scale = max(1.0, len(ranked) / 3)
        weights = [
            math.exp(-r / scale) * (1 + self.novelty * self._novelty(v, island)) for r, v in enumerate(ranked)
        ]
        return rng.choices(ranked, weights=weights)[0]

    def inspirations(self, island: int, exclude: Sequence[str], k: int) -> list[str]:
        """The fastest members of the other islands (then of this one) not among ``exclude``."""
        others = [v for i in range(len(self.islands)) if i != island for v in self._ranked(i)]
        pool = [*others, *self._ranked(island)]
        out: list[str] = []
        for v in pool:
            if v not in exclude and v not in out:
                out.append(v)
        return sorted(out, key=lambda v: self.members[v].best_ms)[:k]

    def _novelty(self, vid: str, island: int) -> float:
        """1 - the highest token-set similarity to another member of the island."""
        mine = self._token_set(vid)
        sims = [
            len(mine & other) / max(1, len(mine | other))
            for v in self.islands[island] if v != vid
            for other in (self._token_set(v),)
        ]
        return 1.0 - max(sims, default=0.0)

    def _token_set(self, vid: str) -> set[str]:
        if vid not in self._tokens:
            self._tokens[vid] = set(_TOKEN.findall(normalize_source(self._source(vid))))
        return self._tokens[vid]
