"""Settings as Hydra structured configs: one type and one default per setting."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ValidationError

from evolve.paths import CONF_DIR
from evolve.settings import BackendSettings, EvolveConfig, LLMSettings, SearchSettings, StorageSettings

TYPED_GROUPS = {"search": SearchSettings, "llm": LLMSettings, "storage": StorageSettings,
                "backend": BackendSettings}


def compose_with(*overrides: str) -> DictConfig:
    import evolve.settings  # noqa: F401  (registers the schema)

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize(("override", "error"), [
    ("search.n_trial=5", ConfigAttributeError), ("search.n_trials=abc", ValidationError),
    ("search.timeout=soon", ValidationError), ("llm.concurrency=1.5", ValidationError),
    ("evolution.operators.mutate=often", ValidationError), ("role=both", ValidationError),
    ("storage.artifact=x", ConfigAttributeError),
])
def test_the_schema_refuses_unknown_settings_and_wrong_types(override: str, error: type) -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose_with(override)
    assert isinstance(info.value.__cause__, error)


@pytest.mark.parametrize("group", sorted(TYPED_GROUPS))
def test_option_files_hold_only_what_differs_from_the_defaults(group: str) -> None:
    """A default has one home, its dataclass: a copy in an option file could drift from it."""
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        _differs(yaml.safe_load(path.read_text()) or {}, TYPED_GROUPS[group](), path.name)


def _differs(given: Mapping[str, Any], defaults: Any, where: str) -> None:
    """Every key is a setting, and no value repeats its default (nested settings: key by key)."""
    names = {f.name for f in dataclasses.fields(defaults)}
    for key, value in given.items():
        assert key in names, f"{where}: {key} is not a setting"
        default = getattr(defaults, key)
        if dataclasses.is_dataclass(default):
            _differs(value, default, f"{where}: {key}")
        else:
            assert value != default, f"{where}: {key}={value!r} repeats the default"


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF_DIR / "backend").glob("*.yaml")))
def test_a_backend_given_only_its_name_has_the_settings_of_its_option_file(name: str) -> None:
    """What a backend reads of a partial mapping (a test's, a benchmark's) is what a run composes
    (cupy's device is the run's worker, 0 here)."""
    composed = OmegaConf.to_object(compose_with(f"backend={name}", "evaluator=0").backend)
    assert composed == BackendSettings.from_config({"name": name})


def test_the_top_configuration_leaves_the_settings_to_the_schema() -> None:
    top = yaml.safe_load((CONF_DIR / "config.yaml").read_text())
    assert set(top) == {"defaults", "hydra"}
    assert top["defaults"][0] == "evolve_schema"


def test_the_composed_defaults_are_the_schemas() -> None:
    cfg = compose_with("search.n_trials=7", "search.timeout=2")
    assert cfg.search.n_trials == 7 and cfg.search.timeout == 2.0
    assert {k: cfg.search[k] for k in ("sampler", "climb", "explore", "heartbeat_s")} == {
        k: getattr(SearchSettings(), k) for k in ("sampler", "climb", "explore", "heartbeat_s")}
    assert cfg.evolution.proposer_heartbeat_s == 5.0 and cfg.evolution.proposer_stale_after_s == 60.0
    assert set(cfg) == {f.name for f in dataclasses.fields(EvolveConfig)}
