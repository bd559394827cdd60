"""The whole configuration is checked before anything is created: every mistake is one line that
names the key, and a refused run leaves no storage and no study behind."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from evolve.app.validation import validate
from evolve.errors import EvolveError
from evolve.paths import CONF_DIR, KERNELS_DIR, ROOT
from tests.helpers.runs import cli, one_line_error
from tests.helpers.tasks import TASKS

REPLAY = ["backend=replay", "hardware=h200", "llm=none", "run.name=t"]


def config(*overrides: str) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*REPLAY, *overrides])
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def test_a_sound_configuration_passes_and_gives_its_task() -> None:
    task = validate(config("task=sgemm", "search.n_trials=0", "search.timeout=30.5"))
    assert task.name == "sgemm" and len(task.seed_paths) == 3


@pytest.mark.parametrize("name", TASKS)
def test_every_built_in_task_and_its_seeds_pass(name: str) -> None:
    assert validate(config(f"task={name}")).name == name


def test_a_seed_naming_what_the_task_does_not_have_is_refused(tmp_path: Path) -> None:
    """On replay its trials were all 'not_recorded', hiding the mistake; on the GPU each failed."""
    seed = tmp_path / "typo.cu"
    source = (KERNELS_DIR / "vector_add/naive.cu").read_text()
    seed.write_text(source.replace("args: [a, b, c, n]", "args: [a, b, c, nn]"))
    with pytest.raises(EvolveError) as exc:
        validate(config("task=vector_add", f"task.seeds=[{seed}]"))
    assert "typo.cu: its launch spec names ['nn'], which are not sizes (n), task arguments (a, b, c)" in str(
        exc.value)


@pytest.mark.parametrize(("overrides", "needle"), [
    (["search.n_trials=-5"], "search.n_trials must be an integer >= 0, got -5"),
    (["search.timeout=0"], "search.timeout must be a number > 0"),
    (["search.sampler=foo"], "unknown search.sampler 'foo'"),
    (["search.explore=-1"], "search.explore must be a number >= 0"),
    (["search.heartbeat_s=60", "search.stale_after_s=30"], "must be longer than search.heartbeat_s"),
    (["evaluators=0"], "evaluators must be a number or auto (at least 1)"),
    (["role=propose"], "role=propose needs an LLM"),
    (["hardware=auto"], "backend=replay needs a named hardware target"),
    (["backend=cupy", "backend.timeout_s=-1"], "backend.timeout_s must be a number > 0"),
    (["backend=cupy", "backend.compile_ahead=lots"], "backend.compile_ahead must be an integer >= 0"),
    (["backend=cupy", "backend.timing.rounds=0"], "backend.timing.rounds must be an integer >= 1"),
    (["storage=postgres", "storage.url=null"], "storage.url is required"),
    (["llm=replay", "llm.recording=nowhere.jsonl"], "llm.recording=nowhere.jsonl does not exist"),
    (["llm.max_calls=-1"], "llm.max_calls must be an integer >= 0"),
    (["evolution.islands=0"], "evolution.islands must be an integer >= 1"),
    (["evolution.operators.mutate=0", "evolution.operators.mutate_diff=0", "evolution.operators.crossover=0"],
     "at least one rate must be above 0"),
    (["+evolution.prompts.bogus=x.md"], "evolution.prompts.bogus: no such template"),
    (["objective.reduce=mean"], "objective.reduce must be one of"),
    (["llm=local"], "llm.model must be given for llm=local"),
    (["llm=local", "llm.model=m"], "llm.base_url must be given for llm=local"),
    (["llm=replay"], "llm=replay needs llm.recording"),
])
def test_every_mistake_is_one_line_naming_the_key(overrides: list[str], needle: str) -> None:
    """Values of the wrong type (search.n_trials=abc, role=boss) are refused earlier, when the
    settings' schema composes them (test_settings, and test_cli for the one line)."""
    with pytest.raises(EvolveError) as exc:
        validate(config(*overrides))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_the_llm_key_is_checked_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EvolveError, match="OPENAI_API_KEY is not set"):
        validate(config("llm=openai"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    validate(config("llm=openai"))
    validate(config("llm=openai", "role=evaluate"))  # an evaluator never calls the LLM
    validate(config("llm=local", "role=evaluate"))  # nor needs its model or endpoint


def test_a_sampler_whose_package_is_missing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, as where it is not installed
    with pytest.raises(EvolveError, match=r"search\.sampler=gp needs the torch package"):
        validate(config("search.sampler=gp"))


def test_a_seed_with_a_bad_spec_is_refused(tmp_path: Path) -> None:
    seed = tmp_path / "bad.cu"
    seed.write_text('/*@evolve\nkernels: []\ntunables: {}\n*/\nextern "C" __global__ void k() {}\n')
    with pytest.raises(EvolveError, match=r"seed .*bad\.cu: 'kernels' must be a non-empty list"):
        validate(config(f"task.seeds=[{seed}]"))


@pytest.mark.parametrize("args", [
    ("search.sampler=foo",), ("search.n_trials=abc",), ("search.n_trials=-5",), ("llm=openai",),
    (f"task.seeds=[softmax/naive.cu,{ROOT}/pyproject.toml]",),
])
def test_a_refused_run_creates_no_storage_and_no_study(in_tmp: Path, args: tuple[str, ...]) -> None:
    one_line_error(cli("backend=replay", "hardware=h200", "run.name=r", *args))
    assert not (in_tmp / "runs" / "evolve.db").exists()
    assert not (in_tmp / "runs" / "artifacts").exists()


@pytest.mark.parametrize(("spec", "where", "problem"), [
    ("kernels:\n  - name: k\n    grid: [1\n    block: 32\n", ":6:10:", "expected ',' or ']'"),
    ("kernels: [{name: k, grid: 1, block: 32, args: []}]\ntunables:\n\tB: {values: [1], default: 1}\n",
     ":5:1:", "found character that cannot start any token"),
])
def test_a_yaml_mistake_in_a_seed_is_shown_at_its_line_and_column(tmp_path: Path, spec: str, where: str,
                                                                   problem: str) -> None:
    seed = tmp_path / "bad.cu"
    seed.write_text(f"// a seed\n/*@evolve\n{spec}*/\nextern \"C\" __global__ void k() {{}}\n")
    with pytest.raises(EvolveError) as exc:
        validate(config(f"task.seeds=[{seed}]"))
    message = str(exc.value)
    assert message.startswith(f"seed {seed}{where} launch spec is not valid YAML: "), message
    assert problem in message
