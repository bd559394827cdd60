"""The evolve command as a user meets it: Hydra help and config groups, errors, multirun."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from hydra import compose, initialize_config_dir

import evolve.settings  # noqa: F401  (registers the configuration schema with Hydra)
from evolve.paths import CONF_DIR, ROOT
from tests.helpers.runs import cli, one_line_error

GROUPS = ("task", "hardware", "objective", "search", "storage", "backend")




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
    assert "backend=check" in out.stdout and "evolve/settings.py" in out.stdout  # issue 28.12


def test_cfg_job_prints_the_composed_config() -> None:
    out = cli("--cfg", "job", "task=sgemm", "search.n_trials=7")
    assert out.returncode == 0
    cfg = yaml.safe_load(out.stdout)
    assert cfg["task"]["name"] == "sgemm" and cfg["search"]["n_trials"] == 7




def _no_nvidia_gpu() -> None:
    if shutil.which("nvidia-smi") and "GPU " in subprocess.run(
            ["nvidia-smi", "--list-gpus"], capture_output=True, text=True).stdout:
        pytest.skip("this machine has a GPU")


def test_without_a_gpu_the_run_stops_with_one_line_naming_the_replay(in_tmp: Path) -> None:
    """Not 'CUDA driver version is insufficient' or 'install CuPy': there is no GPU; say what runs."""
    _no_nvidia_gpu()
    one_line_error(cli("task=softmax"), "no NVIDIA GPU or driver found",
                    "evolve task=softmax backend=replay hardware=h200")
    assert not (in_tmp / "runs" / "evolve.db").exists()
    sweep = cli("-m", "task=softmax,vector_add").stderr  # a sweep is told to add the backend to itself
    assert sweep.count("add backend=replay hardware=h200 to the sweep") == 1, sweep


def test_without_a_gpu_or_cupy_the_advice_is_the_replay_too(in_tmp: Path) -> None:
    _no_nvidia_gpu()
    hide = in_tmp / "hide"  # a sitecustomize that makes `import cupy` fail, in the worker too
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n\n\nclass Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'cupy':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n\n\n"
        "sys.meta_path.insert(0, Hide())\n")
    out = cli("task=sgemm", pythonpath=[hide])
    one_line_error(out, "no NVIDIA GPU or driver found", "CuPy is not installed",
                    "evolve task=sgemm backend=replay hardware=h200")


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
    (("task=nosuch",), "unknown task 'nosuch': built-in tasks: bgemm, hgemm, layernorm"),
    (("llm.max_calls=-",), "llm.max_calls"),
    (("evaluators=two", "backend=replay", "hardware=h200", "llm=none"),
     "evaluators must be a number or auto"),
    # issue 25.2: "worker" is the GPU process; the evaluator processes were renamed, the old name says so
    (("workers=2",), "Key 'workers' not in 'EvolveConfig' (workers is now evaluators)"),
    (("worker=1",), "(worker is now evaluator)"),
    # issue 28.3: every group answers "did you mean", never "+key adds it" for a key nothing reads
    (("backend.timeout=5",), "Key 'timeout' not in 'BackendSettings' (did you mean timeout_s?)"),
    (("backend.compile_timeout=5",), "(did you mean compile_timeout_s"),
    (("backend.timing.warmup=3",), "(did you mean warmup_ms or warmup_min?)"),
    (("task.toleranc.atol=1",), "(did you mean tolerance"),
    (("objective.reduc=first",), "(did you mean reduce?)"),
    (("hardware.sms=3",), "hardware.sms is a named target's figure: hardware=auto reads the GPU"),
    (("+backend.timeout=5", "backend=replay", "hardware=h200"), "backend.timeout is not a setting (did you "
                                                                "mean timeout_s?)"),
    (("+search.foo=5", "backend=replay", "hardware=h200"), "search.foo is not a setting (settings there: "),
    # issue 28.11: timing settings are checked (and accepted) without a GPU too
    (("backend=replay", "hardware=h200", "backend.timing.rounds=0"), "backend.timing.rounds must be an"),
])
def test_user_errors_are_one_line(in_tmp: Path, args: tuple[str, ...], needle: str) -> None:
    out = cli(*args)
    one_line_error(out, needle)
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


def test_every_job_of_a_sweep_with_a_name_gets_its_own_study_and_the_sweep_ends_with_a_table(
        in_tmp: Path) -> None:
    """run.name=exp once made every job "resume" the first job's study (or stop at the second
    task, "exists with a different setup"). A job that fails does not stop the sweep either."""
    out = cli("-m", "task=vector_add,softmax", "search.sampler=random,foo", "run.name=exp", "backend=replay",
              "hardware=h200", "search.n_trials=3", "search.progress=false", "llm=none")
    assert out.returncode == 2, out.stderr  # a job failed: the sweep says so when it ends
    storage = "sqlite:///runs/evolve.db"
    runs = sorted(n for n in optuna.get_all_study_names(storage) if not n.startswith("_"))
    assert runs == ["exp-0", "exp-2"]
    for name, task in (("exp-0", "vector_add"), ("exp-2", "softmax")):
        study = optuna.load_study(study_name=name, storage=storage)
        assert study.user_attrs["task"] == task and len(study.trials) == 3
        assert (in_tmp / "runs" / name / "best.json").is_file()
    table = out.stdout[out.stdout.index("\nSweep runs/sweeps/"):].strip().splitlines()
    assert table[1].split()[:3] == ["job", "task", "search.sampler"]
    rows = [line.split() for line in table[2:6]]
    assert [r[:3] for r in rows] == [["0", "vector_add", "random"], ["1", "vector_add", "foo"],
                                     ["2", "softmax", "random"], ["3", "softmax", "foo"]]
    assert rows[0][-2:] == ["3", "runs/exp-0"] and rows[2][-2:] == ["3", "runs/exp-2"]
    assert rows[2][3] == f'{optuna.load_study(study_name="exp-2", storage=storage).best_value:.4g}'
    assert "failed: unknown search.sampler 'foo'" in table[3]
    # the refused jobs never started: no folder (their row says "-"), their error printed once
    assert rows[1][-1] == "-" and rows[3][-1] == "-"
    assert not (in_tmp / "runs/exp-1").exists() and not (in_tmp / "runs/exp-3").exists()
    assert out.stderr.count("unknown search.sampler 'foo'") == 1 and "(this job: the same)" in out.stderr
    assert "optuna-dashboard sqlite:///runs/evolve.db --artifact-dir runs/artifacts" in table[-1]
    sweep = next((in_tmp / "runs" / "sweeps").iterdir())
    assert "| 2 | softmax | random |" in (sweep / "summary.md").read_text()

    again = cli("-m", "task=vector_add", "search.sampler=random", "run.name=exp", "backend=replay",
                "hardware=h200", "search.n_trials=3", "search.progress=false", "llm=none")
    assert again.returncode == 0, again.stderr  # the same name again resumes job 0: nothing left to run
    assert len(optuna.load_study(study_name="exp-0", storage=storage).trials) == 3
    sweeps = sorted((in_tmp / "runs" / "sweeps").iterdir())  # each sweep keeps its own multirun.yaml
    assert len(sweeps) == 2 and all((s / "multirun.yaml").is_file() for s in sweeps)
    assert "search.sampler=random,foo" in (sweeps[0] / "multirun.yaml").read_text()


def test_version_is_ours_not_hydras() -> None:
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("cuda-evolve 0.1.0 (Hydra "), out.stdout


def test_help_lists_only_evolves_groups() -> None:
    groups = cli("--help").stdout.split("== Configuration groups ==")[1].split("== Configuration ==")[0]
    listed = {line.split(":")[0] for line in groups.splitlines() if ": " in line}
    assert listed == {*GROUPS, "llm"}  # not evolve-bench's bench and preset
    bench = subprocess.run([sys.executable, "-m", "evolve.bench", "--help"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert "preset: full, quick" in bench.stdout


def test_a_refused_resume_keeps_the_runs_record_and_a_failed_run_logs_its_error(in_tmp: Path) -> None:
    replay = ("backend=replay", "hardware=h200", "llm=none", "search.progress=false")
    assert cli(*replay, "run.name=a", "search.n_trials=2").returncode == 0
    record = in_tmp / "runs/a/.hydra/overrides.yaml"
    assert "search.n_trials=2" in record.read_text()
    refused = cli(*replay, "run.name=a", "search.n_trials=3", "task.tolerance.rtol=0.5")
    one_line_error(refused, "exists with a different setup")
    assert "rtol" not in record.read_text()  # the refused overrides did not replace the run's
    assert "exists with a different setup" in (in_tmp / "runs/a/evolve.log").read_text()
    assert cli(*replay, "run.name=a", "search.n_trials=3").returncode == 0  # accepted: recorded
    assert "search.n_trials=3" in record.read_text()
    assert "task:" in (in_tmp / "runs/a/.hydra/config.yaml").read_text()

    one_line_error(cli(*replay, "run.name=b", "search.n_trials=-1"), "search.n_trials")
    assert not (in_tmp / "runs/b").exists()  # issue 28.10: a run that never started leaves no folder


def test_checks_and_refused_commands_leave_no_run_folder(in_tmp: Path) -> None:
    """Issue 28.10: runs/<task>-<date>/ holding an empty evolve.log piled up, one per command."""
    assert cli("task=vector_add", "backend=check", "hardware=h200").returncode == 0
    one_line_error(cli("task=vector_add", "backend=replay", "hardware=a100"), "no recorded measurements")
    one_line_error(cli("task=vector_add", "search.n_trials=-1"), "search.n_trials")
    assert not (in_tmp / "runs").exists(), list((in_tmp / "runs").iterdir())  # not even an empty runs/


def test_the_configuration_is_an_artifact_and_the_attributes_stay_short(in_tmp: Path) -> None:
    from optuna.artifacts import download_artifact, get_all_artifact_meta

    out = cli("backend=replay", "hardware=h200", "llm=none", "run.name=s", "search.n_trials=1")
    assert out.returncode == 0, out.stderr
    study = optuna.load_study(study_name="s", storage="sqlite:///runs/evolve.db")
    assert "config" not in study.user_attrs
    assert max(len(str(v)) for k, v in study.user_attrs.items() if k != "hardware_spec") < 200
    meta = next(m for m in get_all_artifact_meta(study) if m.filename == "config.yaml")
    download_artifact(artifact_store=optuna.artifacts.FileSystemArtifactStore("runs/artifacts"),
                      artifact_id=meta.artifact_id, file_path="config.yaml")
    config = yaml.safe_load(Path("config.yaml").read_text())
    assert config["run"]["name"] == "s" and config["task"]["name"] == "softmax"


def test_a_slurm_sweep_where_there_is_no_slurm_is_one_line(in_tmp: Path) -> None:
    if shutil.which("sbatch"):
        pytest.skip("SLURM is here")
    out = cli("-m", "hydra/launcher=evolve_slurm", "evaluator=0,1", "role=evaluate", "backend.device=0",
              "task=sgemm", "run.name=big")
    one_line_error(out, "submits the jobs to SLURM, and this machine has no sbatch")


def test_a_gpu_command_line_can_be_tried_first_without_a_gpu(in_tmp: Path) -> None:
    """Issue 28.11: backend.timing.* is accepted by backend=replay (which ignores it), not refused."""
    out = cli("task=vector_add", "backend=replay", "hardware=h200", "llm=none", "search.n_trials=1",
              "backend.timing.rounds=3", "backend.timing.warmup_ms=10", "backend.compile_timeout_s=30")
    assert out.returncode == 0, out.stderr
