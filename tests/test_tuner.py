"""The per-variant tuner: proposals are valid, never repeated, and the space runs out cleanly."""

import pytest

from evolve.samplers import SAMPLERS, make_sampler
from evolve.spec import parse_spec
from evolve.tuner import VariantTuner

SPEC = parse_spec("""/*@evolve
kernels: [{name: k, grid: 1, block: B, args: []}]
tunables:
  B: {values: [32, 64, 128, 256, 512, 1024], default: 256}
  U: {values: [1, 2, 4, 8], default: 1}
restrictions: [B * U <= 1024]
*/""")


@pytest.mark.parametrize("sampler", [s for s in SAMPLERS if s != "gp"])
def test_proposals_cover_the_valid_space_once(sampler: str) -> None:
    tuner = VariantTuner("v", SPEC, make_sampler(sampler, 0), seed=0)
    seen = []
    while (cfg := tuner.propose()) is not None:
        assert SPEC.is_valid(cfg)
        seen.append(tuple(sorted(cfg.items())))
        tuner.observe(cfg, float(cfg["B"]) / cfg["U"] if cfg["U"] < 8 else None)  # some fail
    assert len(seen) == len(set(seen)) == len(SPEC.space())
    assert tuner.exhausted and tuner.best == 32 / 4


def test_history_and_pending_candidates_are_never_proposed_again() -> None:
    tuner = VariantTuner("v", SPEC, make_sampler("random", 1), seed=1)
    space = SPEC.space()
    for cfg in space[:-2]:
        tuner.observe(cfg, 1.0)
    tuner.mark_pending(space[-2])
    assert tuner.propose() == space[-1]
    assert tuner.propose() is None
    tuner.observe(space[-2], 0.5)
    assert tuner.best == 0.5 and tuner.n_measured == len(space) - 1
