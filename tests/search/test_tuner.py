"""The per-variant tuner: proposals are valid, never repeated, and the space runs out cleanly."""

import pytest

from evolve.kernel.spec import parse_spec
from evolve.search.samplers import SAMPLERS, make_sampler
from evolve.search.tuner import VariantTuner

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



def _steps(tuner: VariantTuner, a: dict[str, int], b: dict[str, int]) -> int:
    return tuner._distance(a, tuner._indices(b))


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_the_climb_measures_the_neighbours_of_the_best_before_going_elsewhere(sampler: str) -> None:
    """Times fall toward B=64, U=2, so the best moves while the climb is under way."""
    tuner = VariantTuner("v", SPEC, make_sampler(sampler, 2), seed=2)
    measured = {}

    def measure(cfg: dict[str, int]) -> None:
        measured[cfg["B"], cfg["U"]] = value = abs(cfg["B"] - 64) / 32 + abs(cfg["U"] - 2) + 1
        tuner.observe(cfg, value)

    measure(SPEC.default)
    climbed = 0
    while (cfg := tuner.propose()) is not None:
        best = dict(zip("BU", min(measured, key=measured.__getitem__), strict=True))
        if any((c["B"], c["U"]) not in measured and _steps(tuner, c, best) == 1 for c in SPEC.space()):
            assert _steps(tuner, cfg, best) == 1, (cfg, best)
            climbed += 1
        measure(cfg)
    assert tuner.best == 1.0 and len(measured) == len(SPEC.space()) and climbed >= 6


def test_without_the_climb_the_sampler_alone_decides() -> None:
    """Random sampling from the default: some early proposal is not a neighbour of the best."""
    tuner = VariantTuner("v", SPEC, make_sampler("random", 0), seed=0, climb=False)
    tuner.observe(SPEC.default, 1.0)
    far = [_steps(tuner, cfg, SPEC.default) for cfg in (tuner.propose() for _ in range(6))]
    assert max(far) > 1
