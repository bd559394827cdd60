"""The evolve command as a user meets it: Hydra help and config groups, errors, multirun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from hydra import compose, initialize_config_dir

import evolve.settings  # noqa: F401  (registers the configuration schema with Hydra)
from evolve.paths import CONF_DIR, ROOT

GROUPS = ("task", "hardware", "objective", "search", "storage", "backend")


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVOLVE_LLM_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "evolve", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_composes(group: str) -> None:
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    assert options
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for opt in options:
            cfg = compose("config", overrides=[f"{group}={opt}"])
            assert cfg[group]["name" if group not in ("search", "storage") else next(iter(cfg[group]))]


def test_help_lists_the_groups_and_examples() -> None:
    out = cli("--help")
    assert out.returncode == 0
    for group in GROUPS:
        assert f"{group}:" in out.stdout
    assert "optuna-dashboard sqlite:///runs/evolve.db --artifact-dir runs/artifacts" in out.stdout


def test_cfg_job_prints_the_composed_config() -> None:
    out = cli("--cfg", "job", "task=sgemm", "search.n_trials=7")
    assert out.returncode == 0
    cfg = yaml.safe_load(out.stdout)
    assert cfg["task"]["name"] == "sgemm" and cfg["search"]["n_trials"] == 7


def _one_line_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("evolve:")]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_without_a_gpu_the_run_stops_with_one_line(in_tmp: Path) -> None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("this machine has a GPU")
    except Exception:
        pass
    _one_line_error(cli("task=softmax"), "no usable CUDA GPU")


@pytest.mark.parametrize(("args", "needle"), [
    (("backend=replay",), "needs a named hardware target"),
    (("backend=replay", "hardware=a100"), "no recorded measurements"),
    (("backend=replay", "hardware=h200", "search.sampler=annealing"), "unknown search.sampler"),
    (("storage=postgres",), "storage.url is required"),
    (("storage=postgres", "storage.url=postgresql://u:hunter2@127.0.0.1:1/x", "backend=replay",
      "hardware=h200"), "cannot open storage"),
    (("task.seeds=[missing.cu]",), "not found"),
    (("search.n_trial=5",), "Key 'n_trial' not in 'SearchSettings' (did you mean n_trials?)"),
    (("search.n_trials=abc",), "search.n_trials=abc: Value 'abc' of type 'str' could not be converted"),
    (("role=foo",), "expected one of [all, propose, evaluate]"),
    (("evolution.prompts.mutate=x.md",), "(+evolution.prompts.mutate=x.md adds it)"),
    (("task=nosuch",), "Could not find 'task/nosuch': choose one of layernorm"),
    (("llm.max_calls=-",), "llm.max_calls"),
    (("workers=two", "backend=replay", "hardware=h200", "llm=none"), "workers must be a number or auto"),
])
def test_user_errors_are_one_line(in_tmp: Path, args: tuple[str, ...], needle: str) -> None:
    out = cli(*args)
    _one_line_error(out, needle)
    assert "hunter2" not in out.stderr


def test_multirun_makes_one_study_per_job(in_tmp: Path) -> None:
    out = cli("-m", "task=vector_add,softmax", "search.sampler=tpe,random", "backend=replay",
              "hardware=h200", "search.n_trials=4", "search.progress=false", "llm=none")
    assert out.returncode == 0, out.stderr
    names = optuna.get_all_study_names("sqlite:///runs/evolve.db")
    runs = [n for n in names if not n.startswith("_")]
    assert len(runs) == 4
    for n in runs:
        assert (in_tmp / "runs" / n / "best.json").is_file()
        assert len(optuna.load_study(study_name=n, storage="sqlite:///runs/evolve.db").trials) == 4
