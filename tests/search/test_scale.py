"""Scale-out: several evaluator processes and a proposer on one study in a real PostgreSQL server.

The replay backend stands in for the GPUs and a loopback server speaks the OpenAI protocol; the
processes share nothing but the storage (and the artifact directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from evolve.evaluate.measurement import NOT_COUNTED
from evolve.paths import KERNELS_DIR, ROOT
from evolve.record.schema import counts_toward_budget, fixed_params
from tests.helpers.openai_server import OpenAIServer, Reply, kernel_answer

TILED = (KERNELS_DIR / "transpose/tiled.cu").read_text()
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVOLVE_LLM_"))},
       "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test"}


def common(url: str, n: int) -> list[str]:
    return ["task=transpose", "run.name=multi", f"search.n_trials={n}", "hardware=h200", "storage=postgres",
            f"storage.url='{url}'", f"task.seeds=[{KERNELS_DIR / 'transpose/naive.cu'}]",
            "search.progress=false", "search.heartbeat_s=0.5", "search.stale_after_s=3"]


def evaluator(url: str, n: int, delay_s: float = 0.5) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "evolve", *common(url, n), "role=evaluate", "backend=replay", "llm=none",
         f"backend.delay_s={delay_s}", "evolution.idle_wait_s=8"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def counted(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if counts_toward_budget(t)]


def test_evaluators_and_a_proposer_share_one_study_and_one_budget(in_tmp: Path, postgres_url: str) -> None:
    storage = optuna.storages.RDBStorage(postgres_url)
    with OpenAIServer(lambda r: Reply(kernel_answer(TILED))) as server:
        # the first evaluator creates the run; its pace leaves the others time to start on a loaded
        # machine, and the second never finishes a measurement: it is killed while measuring
        workers = [evaluator(postgres_url, 18, delay_s=1.0)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if optuna.load_study(study_name="multi", storage=storage).user_attrs.get("hardware_spec"):
                    break
            except KeyError:
                pass
            time.sleep(0.2)
        workers += [evaluator(postgres_url, 18, delay_s=600), evaluator(postgres_url, 18)]
        proposer = subprocess.Popen(
            [sys.executable, "-m", "evolve", *common(postgres_url, 18), "role=propose", "llm=openai",
             f"llm.base_url={server.base_url}", "llm.max_calls=2"],
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        study = optuna.load_study(study_name="multi", storage=storage)
        killed = f":{workers[1].pid}"
        held: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not held and workers[1].poll() is None:
            time.sleep(0.1)
            held = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                    if t.user_attrs.get("worker", "").endswith(killed)]
        workers[1].send_signal(signal.SIGKILL)  # while it is measuring trial `held`
        outs = [w.communicate(timeout=180) for w in workers]
        proposer.communicate(timeout=180)
    assert [w.returncode for w in workers[::2]] == [0, 0], [o[1][-2000:] for o in outs]
    assert proposer.returncode == 0
    done = counted(study)
    table = "\n".join(f"{t.number} {t.state.name} {t.user_attrs.get('status')} {t.user_attrs.get('worker')} "
                      f"{t.user_attrs.get('variant_name')} {t.user_attrs.get('operator')} {fixed_params(t)}"
                      for t in study.get_trials(deepcopy=False))
    assert len(done) == 18, f"exactly the budget, across three processes\n{table}"
    keys = [(t.user_attrs["variant"], tuple(sorted(t.params.items()))) for t in done]
    assert len(set(keys)) == len(keys), "no candidate measured twice"
    left = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    assert not left, "the killed worker's trial was reaped"
    assert any(t.user_attrs["operator"] in ("mutate", "mutate_diff") for t in done), "the proposer's child"
    assert held, "the worker was killed while measuring"
    for number in held:  # what the killed worker was measuring was failed and queued again
        assert study.trials[number].user_attrs["status"] == "interrupted"
    measured_by = {t.user_attrs["worker"].rsplit(":", 1)[1] for t in done}
    assert len(measured_by) >= 2, "the work was shared"

    # the whole search resumes afterwards, in one process, to a larger budget (the space holds 26)
    resumed = subprocess.run([sys.executable, "-m", "evolve", *common(postgres_url, 24), "backend=replay",
                              "llm=none"], env=ENV, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert len(counted(optuna.load_study(study_name="multi", storage=storage))) == 24


def _counted_by_worker(url: str, name: str) -> tuple[int, set[str]]:
    study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(url))
    done = counted(study)
    return len(done), {t.user_attrs["worker"] for t in done}


def test_workers_start_one_evaluator_per_gpu(in_tmp: Path, postgres_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "evolve", "task=softmax", "run.name=w", "evaluators=2", "backend=replay",
         "hardware=h200", "llm=none", "storage=postgres", f"storage.url='{postgres_url}'",
         "search.n_trials=12", "backend.delay_s=0.1", "search.progress=false", "evolution.idle_wait_s=3"],
        env=ENV, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    n, workers = _counted_by_worker(postgres_url, "w")
    assert n == 12 and len(workers) == 2
    trials = optuna.load_study(study_name="w", storage=optuna.storages.RDBStorage(postgres_url)).trials
    idle = [t.user_attrs.get("status") for t in trials if t.user_attrs.get("status") in NOT_COUNTED]
    # two evaluators can race for one queued trial (Optuna then makes a fresh, empty one), but an
    # evaluator near the end waits instead of making trials it cannot use (it once made 135)
    assert len(idle) <= 6, idle
    assert "best" in out.stdout and (in_tmp / "runs/w/best.json").is_file()
    # the evaluators it started share its terminal: one summary, and a new run is not "resumed"
    assert out.stdout.count("softmax: best") == 1, out.stdout
    assert "resuming run" not in out.stderr, out.stderr[-3000:]


def test_hydra_joblib_launcher_runs_evaluators_in_parallel(in_tmp: Path, postgres_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "evolve", "-m", "hydra/launcher=joblib", "evaluator=0,1,2", "role=evaluate",
         "task=transpose", "run.name=jl", "backend=replay", "hardware=h200", "llm=none", "storage=postgres",
         f"storage.url='{postgres_url}'", "search.n_trials=15", "backend.delay_s=0.1",
         "search.progress=false", "evolution.idle_wait_s=3"],
        env=ENV, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    n, workers = _counted_by_worker(postgres_url, "jl")
    assert n == 15 and len(workers) >= 2


def test_evaluators_under_the_joblib_launcher_can_start_their_gpu_worker(in_tmp: Path) -> None:
    """A joblib job runs in a loky process; the GPU worker it spawned died at birth ("cannot find
    context for 'loky'", a traceback per job). Here, without a GPU, the worker must get as far as
    asking CuPy for the device."""
    smi = subprocess.run(["sh", "-c", "nvidia-smi --list-gpus"], capture_output=True, text=True)
    if "GPU " in smi.stdout:
        pytest.skip("a GPU is here: run the joblib command of docs/scaling-out.md with storage=postgres")
    out = subprocess.run(
        [sys.executable, "-m", "evolve", "-m", "hydra/launcher=joblib", "evaluator=0,1", "role=evaluate",
         "task=vector_add", "run.name=jw", "backend=cupy", "search.progress=false"],
        env=ENV, capture_output=True, text=True, timeout=240,
    )
    assert "Traceback" not in out.stderr and "loky" not in out.stderr, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("evolve: ")]
    assert len(lines) == 2 and all("the GPU worker said: no usable CUDA GPU" in line for line in lines), lines


def test_several_evaluators_refuse_sqlite(in_tmp: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "evolve", "evaluators=2", "backend=replay", "hardware=h200",
                          "llm=none"], env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "storage=postgres" in out.stderr
