"""The GPU suite (pytest -m gpu on the GPU machine): real kernels, really measured."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from evolve.evaluate.cupy_backend import CupyBackend
from evolve.evaluate.measurement import Status
from evolve.evaluate.objective import Objective
from evolve.hardware import Hardware
from evolve.kernel.spec import Variant
from evolve.paths import KERNELS_DIR, ROOT
from evolve.record.variants import VariantStore
from evolve.search.loop import Search, SearchSettings
from evolve.task.task import Task
from tests.helpers.null_kernels import null_variants
from tests.helpers.tasks import TASKS, task

Get = Callable[[str], tuple[Task, CupyBackend, Hardware]]


@pytest.fixture(scope="module")
def gpu() -> Iterator[Get]:
    made: dict[str, tuple[Task, CupyBackend, Hardware]] = {}

    def get(name: str) -> tuple[Task, CupyBackend, Hardware]:
        if name not in made:
            t = task(name)
            b = CupyBackend({"timeout_s": 120, "timing": {}})
            made[name] = (t, b, b.start(t, None))
        return made[name]

    yield get
    for _, b, _ in made.values():
        b.close()


@pytest.mark.parametrize("name", TASKS)
def test_every_seed_passes_at_its_default(gpu: Get, name: str) -> None:
    t, b, _ = gpu(name)
    for v in t.seeds():
        m = b.evaluate(v, v.spec.default, t.timing_sizes[:1])
        assert m.status is Status.OK, f"{v.name}: {m.status} {m.reason}"
        assert next(iter(m.timings.values())).median_s > 0


@pytest.mark.parametrize("name", ["hgemm", "bgemm"])
@pytest.mark.parametrize("shape", [
    {"BM": 128, "BN": 256, "STAGES": 4, "CM": 1}, {"BM": 256, "BN": 128, "STAGES": 4, "CM": 2},
    {"BM": 128, "BN": 192, "STAGES": 5, "CM": 2}, {"BM": 128, "BN": 128, "STAGES": 6, "CM": 1}])
def test_the_hopper_seed_is_right_at_every_size_in_each_of_its_shapes(gpu: Get, name: str,
                                                                      shape: dict[str, int]) -> None:
    """Tile shapes, ring depths and cluster sizes change its barriers' counts and phases and the
    multicast split: each is checked at every correctness size (ragged tiles, K % 8 != 0 through
    the plain path, K = 65536) before it is timed."""
    t, b, _ = gpu(name)
    (v,) = [v for v in t.seeds() if v.name == "hopper"]
    m = b.evaluate(v, {**v.spec.default, **shape}, t.timing_sizes[:1])
    assert m.status is Status.OK, f"{shape}: {m.status} {m.reason}"


@pytest.mark.parametrize("name", TASKS)
def test_null_kernels_are_rejected(gpu: Get, name: str) -> None:
    t, b, _ = gpu(name)
    for case, v in null_variants(t).items():
        m = b.evaluate(v, {}, t.timing_sizes[:1])
        assert m.status is Status.WRONG, f"{case}: {m.status} {m.reason}"


@pytest.mark.timing
@pytest.mark.parametrize("name", TASKS)
def test_same_kernel_timed_twice_agrees_within_2_percent(gpu: Get, name: str) -> None:
    t, b, _ = gpu(name)
    v = t.seeds()[-1]
    a, c = (b.evaluate(v, v.spec.default, t.timing_sizes[:1]) for _ in range(2))
    assert a.ok and c.ok
    ta, tc = (next(iter(m.timings.values())).median_s for m in (a, c))
    assert abs(ta - tc) / min(ta, tc) <= 0.02, (ta, tc)


def test_poisoned_context_and_hang_restart_the_worker(gpu: Get) -> None:
    t, b, _ = gpu("vector_add")
    spec = """/*@evolve
kernels:
  - {name: bad, grid: 1, block: 32, args: [c]}
*/
"""
    illegal = Variant.parse(spec + 'extern "C" __global__ void bad(float* c) '
                            '{ ((float*)0x10)[threadIdx.x] = 1.0f; }')
    m = b.evaluate(illegal, {}, t.timing_sizes[:1])
    assert m.status is Status.CRASHED, m.reason
    hang = Variant.parse(spec + 'extern "C" __global__ void bad(float* c) '
                         '{ for (;;) __nanosleep(1000); }')
    b.timeout_s, saved = 20, b.timeout_s
    try:
        m = b.evaluate(hang, {}, t.timing_sizes[:1])
    finally:
        b.timeout_s = saved
    assert m.status is Status.TIMEOUT, m.reason
    seed = t.seeds()[0]
    assert b.evaluate(seed, seed.spec.default, t.timing_sizes[:1]).ok  # the worker came back


def test_a_worker_killed_mid_measurement_is_restarted(gpu: Get) -> None:
    t, b, _ = gpu("sgemm")
    naive = t.seeds()[0]  # about a second of measuring at 4096^3
    assert b.worker._proc is not None
    pid = b.worker._proc.pid
    threading.Timer(0.3, os.kill, args=(pid, signal.SIGKILL)).start()
    m = b.evaluate(naive, naive.spec.default, t.timing_sizes[:1])
    assert m.status is Status.CRASHED and "exited" in m.reason, m.reason
    again = b.evaluate(naive, naive.spec.default, t.timing_sizes[:1])
    assert again.ok and b.worker._proc is not None and b.worker._proc.pid != pid


@pytest.mark.timing
def test_tuning_beats_the_seed_default_on_most_tasks(gpu: Get, tmp_path: Path) -> None:
    """The tuned configuration must be faster than the best seed default when both are measured
    again, interleaved, twice each: every re-measurement of the winner beats every one of the default."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/t.db")
    artifacts = optuna.artifacts.FileSystemArtifactStore(str(tmp_path))
    wins = {}
    for name in TASKS:
        t, b, hw = gpu(name)
        study = optuna.create_study(study_name=name, storage=storage)
        variants = VariantStore(study, artifacts)
        search = Search(study, variants, b, t, Objective("latency", "first"), hw,
                        SearchSettings(n_trials=20, seed=0, progress=False))
        search.add_seeds(t.seeds())
        search.run()
        done = [x for x in study.trials if x.value is not None]
        base = min((x for x in done if x.user_attrs["operator"] == "seed"), key=lambda x: x.value)
        best = study.best_trial
        again: dict[str, list[float]] = {"base": [], "best": []}
        for _ in range(2):
            for label, trial in (("base", base), ("best", best)):
                m = b.evaluate(variants.get(trial.user_attrs["variant"]), trial.params, t.timing_sizes[:1])
                again[label].append(next(iter(m.timings.values())).median_s * 1e3)
        wins[name] = max(again["best"]) < min(again["base"])
        print(f"{name}: best seed default {base.value:.4f} ms ({base.user_attrs['variant_name']} "
              f"{base.params}) -> tuned {best.value:.4f} ms ({best.user_attrs['variant_name']} "
              f"{best.params}); measured again: default {again['base']} tuned {again['best']}")
    assert sum(wins.values()) >= 4, wins


def test_evolve_end_to_end_then_resume(in_tmp: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "evolve", "task=vector_add", "run.name=e2e", "search.progress=false",
           "llm=none"]
    first = subprocess.run([*cmd, "search.n_trials=3"], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    assert "best" in first.stdout and (in_tmp / "runs/e2e/best.cu").is_file()
    second = subprocess.run([*cmd, "search.n_trials=5"], capture_output=True, text=True, env=env)
    assert second.returncode == 0, second.stderr
    study = optuna.load_study(study_name="e2e", storage="sqlite:///runs/evolve.db")
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 5
    assert len({(t.user_attrs["variant"], tuple(sorted(t.params.items()))) for t in finished}) == 5


ANSWERS = ROOT / "tests" / "llm_answers"


@pytest.mark.parametrize(("name", "answers", "repair"), [
    ("softmax", ["broken_compile.cu", "warp_rows.cu", "block_three_pass.cu"], "repaired.cu"),
    ("transpose", ["smem_tile.cu", "smem_tile_padded.cu"], None),
])
def test_llm_evolution_finds_keeps_and_tunes_the_faster_variant(
        in_tmp: Path, monkeypatch: pytest.MonkeyPatch, name: str, answers: list[str],
        repair: str | None) -> None:
    """Scripted LLM answers are real alternative kernels; the loop must find, keep and tune the best."""
    from hydra import compose, initialize_config_dir

    from evolve.app.run import run
    from evolve.paths import CONF_DIR
    from tests.helpers.openai_server import OpenAIServer, Reply, Request, kernel_answer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    sources = [(ANSWERS / name / a).read_text() for a in answers]
    # the repair: the broken kernel with its typo fixed (not byte-identical to another answer)
    fixed = (ANSWERS / name / "broken_compile.cu").read_text().replace("* inv_sum", "* inv_fixed") \
        .replace("const float inv =", "const float inv_fixed =") if repair else ""
    count = {"n": 0}

    def script(r: Request) -> Reply:
        if repair and "## A kernel that failed" in r.prompt:
            return Reply(kernel_answer(fixed))
        count["n"] += 1
        return Reply(kernel_answer(sources[(count["n"] - 1) % len(sources)]))

    with OpenAIServer(script) as server, initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"task={name}", "run.name=llm", "search.n_trials=30", "search.seed=0", "search.progress=false",
            f"task.seeds=[{KERNELS_DIR / name / 'naive.cu'}]", "llm=openai",
            f"llm.base_url={server.base_url}",
            "llm.model=scripted", f"llm.max_calls={len(answers) + 2}", "evolution.tune_per_child=4",
        ])
        run(cfg)
    study = optuna.load_study(study_name="llm", storage="sqlite:///runs/evolve.db")
    done = [t for t in study.trials if t.state.is_finished()]
    naive = min(t.value for t in done if t.value is not None and t.user_attrs["variant_name"] == "naive")
    best = study.best_trial
    ops = collections.Counter(t.user_attrs["operator"] for t in done)
    print(f"{name}: naive {naive:.4f} ms -> best {best.value:.4f} ms ({best.user_attrs['variant_name']} "
          f"{best.params}); trials by operator: {ops}")
    assert best.user_attrs["variant_name"] != "naive" and best.value < naive / 2
    tuned = sum(t.user_attrs["variant"] == best.user_attrs["variant"] for t in done)
    assert tuned >= 2, "the winner is tuned"
    if repair:
        fixed = [t for t in done if t.user_attrs["operator"] == "repair"]
        assert fixed and fixed[0].user_attrs["status"] == "ok", "the broken child was repaired"


def test_the_worker_compiles_the_harness_kernels_before_the_first_trial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28.14: with an empty CuPy kernel cache, the worker's start compiles the helper kernels
    for the task's dtypes (the search's clock has not started); the first trial finds them cached."""
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cupy"))
    from evolve.task.files import read_task_file
    from evolve.task.task import load_task

    t = load_task(read_task_file(Path(__file__).parents[1] / "own_tasks/histogram/histogram.yaml"))
    b = CupyBackend({"timeout_s": 120, "timing": {}})
    try:
        b.start(t, None)
        assert any((tmp_path / "cupy").rglob("*")), "nothing compiled while the worker started"
    finally:
        b.close()
