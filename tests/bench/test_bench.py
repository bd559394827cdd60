"""The bench's own logic on this CPU machine: throughput read off real runs (replay backend,
real SQLite), the search it runs as a user would, the targets, tables and plots it writes.
The GPU sections themselves run on the GPU machine (evolve-bench there)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from evolve.bench import report
from evolve.bench.app import _mix
from evolve.bench.speed import run_search
from evolve.bench.throughput import throughput
from evolve.bench.timer import round_orders
from evolve.paths import KERNELS_DIR, ROOT
from evolve.task.task import builtin_task

REPLAY = ["backend=replay", "hardware=h200"]


def test_run_search_returns_the_best_kernel_and_its_throughput(tmp_path: Path) -> None:
    found = run_search("transpose", tmp_path, 12, "tpe", REPLAY)
    tp = found["throughput"]
    assert tp.candidates == 12 and tp.evaluators == 1 and tp.per_min > 0
    assert found["best"]["task"] == "transpose" and found["best"]["variant"]["name"] in {
        v.name for v in builtin_task("transpose").seeds()}
    study = optuna.load_study(study_name="transpose-tpe-12", storage=f"sqlite:///{tmp_path}/bench.db")
    best = min(t.value for t in study.trials if t.value is not None)
    assert found["best"]["time_ms"] == pytest.approx(best)
    assert tp.compile_s > 0 and tp.timing_s > 0  # read off the trials' attributes
    mix = _mix([tp.to_dict(), tp.to_dict()])
    assert mix["candidates"] == 24 and mix["per_min"] == pytest.approx(tp.per_min)



def test_an_evolved_run_is_timed_beside_its_seeds_tuned_alone(tmp_path: Path) -> None:
    """speed.runs: the run's best kernel and the run's own seeds (not the task's) tuned under the
    bench's budget, each launchable from its best.cu with its tunables; a run of another task or
    an unfinished one is one clear error."""
    from evolve.bench.speed import evolved
    from evolve.errors import EvolveError
    from evolve.kernel.spec import Variant

    found = run_search("transpose", tmp_path / "evolve", 8, "random",
                       [*REPLAY, f"task.seeds=[{KERNELS_DIR / 'transpose/naive.cu'}]"], name="ev")
    run_dir = tmp_path / "evolve/runs/ev"
    task = builtin_task("transpose")
    rows = evolved(task, run_dir, tmp_path / "bench", 6, "random", REPLAY)
    assert [kind for kind, _, _ in rows.values()] == ["evolved", "seed tuned"]
    (ev_name, (_, ev_src, ev_tun)), (alone_name, (_, alone_src, alone_tun)) = rows.items()
    assert ev_name.startswith("evolved (ev): naive") and ev_tun == found["best"]["tunables"]
    assert alone_name.startswith("naive tuned alone (6 trials)")  # the run's one seed, not tiled/vectorized
    for src, tun in ((ev_src, ev_tun), (alone_src, alone_tun)):
        space = {tu.name: tu.values for tu in Variant.parse(src, name="x").spec.tunables}
        assert set(tun) == set(space) and all(v in space[k] for k, v in tun.items())
    with pytest.raises(EvolveError, match="is a run of transpose, not softmax"):
        evolved(builtin_task("softmax"), run_dir, tmp_path / "bench", 6, "random", REPLAY)
    with pytest.raises(EvolveError, match="is not a finished evolve run"):
        evolved(task, tmp_path / "nothing", tmp_path / "bench", 6, "random", REPLAY)


def test_kernel_tuner_gets_the_whole_device_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy cuts the UUID at its first zero byte; Kernel Tuner parses 16 bytes. The stand-in for
    the driver call is the only fake: what is checked is the padding around it."""
    import uuid

    import cupy as cp

    from evolve.bench.versus import _whole_device_uuid

    def cut(device: int) -> dict[str, Any]:
        return {"name": b"H200", "uuid": bytes([0x5a, 0x11])}

    monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties", cut)
    with pytest.raises(ValueError):
        uuid.UUID(bytes=cp.cuda.runtime.getDeviceProperties(0)["uuid"])
    with _whole_device_uuid():
        props = cp.cuda.runtime.getDeviceProperties(0)
        assert str(uuid.UUID(bytes=props["uuid"])).startswith("5a110000-") and props["name"] == b"H200"
    assert cp.cuda.runtime.getDeviceProperties is cut

def test_a_failed_search_names_its_log(tmp_path: Path) -> None:
    from evolve.errors import EvolveError

    with pytest.raises(EvolveError, match=r"search-.*\.log"):
        run_search("transpose", tmp_path, 5, "no-such-sampler", REPLAY)


def test_throughput_skips_trials_that_measured_nothing(tmp_path: Path) -> None:
    found = run_search("softmax", tmp_path, 6, "random", REPLAY)
    study = optuna.load_study(study_name="softmax-random-6", storage=f"sqlite:///{tmp_path}/bench.db")
    trial = study.ask()
    trial.set_user_attr("status", "over_budget")
    trial.set_user_attr("eval_s", 0.0)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert throughput(study.get_trials()).candidates == found["throughput"].candidates == 6


def _trial(n: int, start: float, end: float, eval_s: float, worker: str = "w0") -> FrozenTrial:
    t0 = datetime.datetime(2026, 11, 30)
    return FrozenTrial(
        number=n, trial_id=n, state=TrialState.COMPLETE, value=1.0, values=None, params={},
        distributions={}, intermediate_values={}, system_attrs={},
        user_attrs={"worker": worker, "eval_s": eval_s, "compile_s": 0.5, "check_s": 0.5},
        datetime_start=t0 + datetime.timedelta(seconds=start),
        datetime_complete=t0 + datetime.timedelta(seconds=end))


def test_throughput_counts_a_trial_queued_ahead_from_its_predecessors_end() -> None:
    """The look-ahead starts trial 1 while trial 0 is measured: storage is what neither trial's
    evaluator time covers, not the overlap of their spans."""
    trial = _trial
    tp = throughput([trial(0, 0.0, 4.0, 3.5), trial(1, 1.0, 8.0, 3.5), trial(2, 9.0, 12.0, 2.0)])
    assert tp.wall_s == 12.0 and tp.candidates == 3
    assert tp.storage_s == pytest.approx(0.5 + 0.5 + 1.0)  # spans 4 + 4 + 3 minus evaluations 9
    assert tp.other_s == pytest.approx(1.0)  # the gap from 8 to 9 s
    assert tp.compile_s + tp.check_s + tp.timing_s + tp.storage_s + tp.other_s == pytest.approx(tp.wall_s)


def test_a_resumed_run_is_one_evaluator_and_its_pauses_are_no_ones_time() -> None:
    """Three sessions of one run (two resumes, hours apart) once counted as three evaluators, and
    the hours in between as their time."""
    hour = 3600.0
    trials = [_trial(0, 0.0, 2.0, 1.5, "h:1"), _trial(1, 2.0, 4.0, 1.5, "h:1"),
              _trial(2, hour, hour + 2.0, 1.5, "h:2"), _trial(3, 2 * hour, 2 * hour + 3.0, 2.5, "h:3")]
    tp = throughput(trials)
    assert tp.evaluators == 1 and tp.wall_s == pytest.approx(9.0) and tp.evaluator_s == pytest.approx(9.0)
    assert tp.per_min == pytest.approx(60 * 4 / 9.0) and tp.per_min_per_gpu == pytest.approx(tp.per_min)
    shares = tp.shares()
    assert all(0 <= v <= 1 for v in shares.values()) and sum(shares.values()) == pytest.approx(1.0)
    assert shares["compile"] == pytest.approx(4 * 0.5 / 9.0)


def test_evaluators_at_once_are_counted_and_each_has_its_own_time() -> None:
    trials = [_trial(0, 0.0, 4.0, 3.0, "a:1"), _trial(1, 4.0, 8.0, 3.0, "a:1"),
              _trial(2, 1.0, 5.0, 3.0, "b:1"), _trial(3, 5.0, 9.0, 3.0, "b:1")]
    tp = throughput(trials)
    assert tp.evaluators == 2 and tp.wall_s == pytest.approx(9.0) and tp.evaluator_s == pytest.approx(16.0)
    assert tp.per_min_per_gpu == pytest.approx(60 * 4 / 16.0)
    assert sum(tp.shares().values()) == pytest.approx(1.0) and tp.shares()["other"] == 0


def test_a_replayed_run_shows_no_breakdown_of_times_it_never_spent(tmp_path: Path) -> None:
    """On the replay backend the trials carry the recording's GPU times: dividing them by this
    run's wall time once gave 'compile 778%'."""
    found = run_search("softmax", tmp_path, 6, "random", REPLAY)
    tp = found["throughput"]
    assert tp.replayed and tp.shares() == {} and tp.candidates == 6
    assert "evaluation times are the recording's" in tp.line() and "%" not in tp.line()


def test_the_throughput_command_reads_a_file_or_url_and_names_an_unknown_run(tmp_path: Path) -> None:
    run_search("softmax", tmp_path, 4, "random", REPLAY)

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "evolve.bench.throughput", *args], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)

    for where in (f"sqlite:///{tmp_path}/bench.db", f"{tmp_path}/bench.db"):
        out = command(where, "softmax-random-4")
        assert out.returncode == 0 and out.stdout.startswith("softmax-random-4: 4 candidates"), out.stderr
    for args, needle in (((f"{tmp_path}/bench.db", "nope"), "no run named 'nope'"),
                         ((f"{tmp_path}/none.db", "x"), "no such file"),
                         ((f"sqlite:///{tmp_path}/none.db", "x"), "no such database")):
        out = command(*args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith("throughput: ") and needle in out.stderr
        assert len(out.stderr.splitlines()) == 1
    assert "(runs: softmax-random-4)" in command(f"{tmp_path}/bench.db", "nope").stderr
    assert not (tmp_path / "none.db").exists()


def _row(name: str, kind: str, ms: float, pct_copy: float) -> dict[str, Any]:
    return {"name": name, "kind": kind, "correct": True, "error": None, "ms": ms, "iqr_ms": 0.01,
            "gbps": 1.0, "tflops": 0.0, "pct_ceiling": pct_copy, "pct_copy": pct_copy}


def _speed(found_ms: float, torch_ms: float, pct: float, compiled_ms: dict[str, float] | None = None,
           ) -> dict[str, Any]:
    """One memory-bound task; `compiled_ms`: torch.compile's time by mode (none: not timed)."""
    rows = [_row("seed a (defaults)", "seed", 2.0, 50.0), _row("cuda-evolve: a X=1", "found", found_ms, pct),
            _row("torch", "peer", torch_ms, 90.0)]
    rows += [_row(f"torch.compile ({mode})", "peer", ms, 90.0) for mode, ms in (compiled_ms or {}).items()]
    speedups = {r["name"]: r["ms"] / found_ms for r in rows if r["kind"] != "found"}
    return {"softmax": {"size": "rows=1", "found": "cuda-evolve: a X=1", "rows": rows,
                        "speedup_of_found": speedups,
                        "search": {"budget": 5, "sampler": "tpe", "wall_s": 3.0}}}


@pytest.mark.parametrize(("found_ms", "torch_ms", "pct", "compiled", "verdict"), [
    (1.0, 1.1, 92.0, {"max-autotune": 1.5, "max-autotune-no-cudagraphs": 1.2}, "met"),
    (1.0, 0.9, 92.0, {"max-autotune": 1.5}, "NOT MET"),
    (1.0, 1.1, 85.0, {"max-autotune": 1.5}, "NOT MET"),
    (1.0, 1.1, 92.0, {"max-autotune": 1.5, "max-autotune-no-cudagraphs": 0.95}, "NOT MET")])
def test_memory_bound_target_needs_the_bandwidth_and_every_torch_peer(
        found_ms: float, torch_ms: float, pct: float, compiled: dict[str, float], verdict: str) -> None:
    lines = report.targets({"speed": _speed(found_ms, torch_ms, pct, compiled)})
    assert len(lines) == 1 and f"— {verdict}" in lines[0], lines
    assert all(f"vs torch.compile ({mode})" in lines[0] for mode in compiled)


@pytest.mark.parametrize(("compiled_ms", "says"), [
    (0.995, "NOT MET; 0.5% slower (inside the IQRs) than torch.compile (x)"),  # IQRs are 0.01 ms
    (0.95, "NOT MET; 5.3% slower than torch.compile (x)")])
def test_a_faster_peer_is_named_with_its_margin_and_whether_that_is_noise(
        compiled_ms: float, says: str) -> None:
    lines = report.targets({"speed": _speed(1.0, 1.1, 95.0, {"x": compiled_ms})})
    assert lines[0].endswith(says), lines


def test_memory_bound_target_is_not_met_without_torch_compile() -> None:
    lines = report.targets({"speed": _speed(1.0, 1.1, 95.0)})
    assert lines[0].endswith("(torch.compile not timed) — NOT MET"), lines


def test_report_writes_tables_and_plots(tmp_path: Path) -> None:
    tp = {"candidates": 10, "per_min": 50.0, "shares": {"compile": 0.5, "timing": 0.5}}
    results = {"date": "2026-11-29", "preset": "quick", "environment": {"gpu": "X"},
               "speed": _speed(1.0, 1.2, 95.0),
               "throughput": {"mix": tp, "versus": {
                   "space": "sgemm/vectorized", "candidates": 10,
                   "cuda-evolve": {"candidates": 10, "wall_s": 10.0, "per_min": 60.0, "best_ms": 3.0,
                                   "warmup_s": 25.0},
                   "kernel_tuner": {"candidates": 10, "wall_s": 40.0, "per_min": 15.0, "best_ms": 3.1,
                                    "warmup_s": 2.5}}}}
    report.write(results, tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert "| cuda-evolve: a X=1 | 1.0000 |" in md and "| torch | 1.2000 |" in md
    assert "4.00x Kernel Tuner's candidates per minute (>= 2) — met" in md
    assert "| cuda-evolve | 10 | 10.0 | 60.0 | 3.0000 | 25.0 |" in md and "| 3.1000 | 2.5 |" in md
    for png in ("speed.png", "throughput.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_bench_refuses_an_unknown_section(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "evolve.bench", "sections=[speed,bogus]", f"out={tmp_path}"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "unknown bench section" in out.stderr


def test_gpu_sections_without_a_gpu_say_so_in_one_line(tmp_path: Path) -> None:
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: the GPU sections would run")
    out = subprocess.run([sys.executable, "-m", "evolve.bench", "sections=[speed]", f"out={tmp_path}"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "sections=[efficiency] and sections=[agent] run without one" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("task_name", ["softmax", "sgemm", "bgemm"])
def test_torch_peers_compute_the_task_in_each_compile_mode(task_name: str) -> None:
    """Each torch.compile mode asked for is its own peer, and every peer computes the task: the
    speed table times only what matches the float64 reference."""
    pytest.importorskip("torch")
    import cupy as cp

    from evolve import dtypes
    from evolve.bench.peers import torch_peers
    from evolve.bench.speed import check
    from evolve.task.task import builtin_task

    task = builtin_task(task_name)
    sizes = task.correctness_sizes[2]
    inputs = task.make_inputs(cp, sizes, seed=1)
    refs = task.expected(cp, inputs, sizes)
    outputs = {a.name: cp.empty(task.shape(a, sizes), dtypes.storage(a.dtype)) for a in task.outputs}
    modes = ["default", "max-autotune-no-cudagraphs"]
    peers = torch_peers(task, {**inputs, **outputs}, modes)
    assert set(peers) == {"torch", *(f"torch.compile ({m})" for m in modes)}
    for name, fn in peers.items():
        assert check(task, sizes, fn, outputs, refs) is None, name


@pytest.mark.gpu
@pytest.mark.parametrize("task_name", ["vector_add", "reduce_sum", "softmax", "layernorm", "transpose",
                                       "sgemm", "hgemm", "bgemm"])
def test_the_triton_peer_computes_the_task(task_name: str) -> None:
    """The Triton peer, autotuned on its first call, matches the float64 reference (the CPU suite runs
    every configuration under Triton's interpreter; this is the compiled kernel on the GPU)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    import cupy as cp

    from evolve import dtypes
    from evolve.bench.peers import triton_peers
    from evolve.bench.speed import check
    from evolve.task.task import builtin_task

    task = builtin_task(task_name)
    for sizes in (task.correctness_sizes[-2], task.timing_sizes[0]):
        inputs = task.make_inputs(cp, sizes, seed=2)
        refs = task.expected(cp, inputs, sizes)
        outputs = {a.name: cp.empty(task.shape(a, sizes), dtypes.storage(a.dtype)) for a in task.outputs}
        peers = triton_peers(task, {**inputs, **outputs})
        assert list(peers) == ["Triton"]
        assert check(task, sizes, peers["Triton"], outputs, refs) is None, sizes


@pytest.mark.gpu
def test_head_to_head_throughput_counts_the_runs_after_each_warm_up(tmp_path: Path) -> None:
    """Both tools measure the asked-for candidates after a warm-up of their own, which is
    reported apart and not counted."""
    pytest.importorskip("kernel_tuner")
    from evolve.bench.versus import WARMUP, evolve_rate, kernel_tuner_rate

    ours = evolve_rate("sgemm", "vectorized", 4, tmp_path)
    theirs = kernel_tuner_rate("sgemm", "vectorized", 4, seed=0)
    for r in (ours, theirs):
        assert r["candidates"] == 4 and r["per_min"] > 0 and r["warmup_s"] > 0, r
        assert r["best_ms"] is not None and r["best_ms"] > 0
    import optuna
    studies = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(f"sqlite:///{tmp_path}/bench.db")
               if s.study_name.startswith("sgemm-")}  # not the hardware's ceilings
    assert studies == {"sgemm-vectorized-warmup": WARMUP, "sgemm-vectorized-versus": 4}, studies


def _gemm(task: str, key: str, size: str, found_ms: float, blas_ms: float) -> tuple[str, dict[str, Any]]:
    rows = [_row("cuda-evolve: hopper BM=128", "found", found_ms, 1.0), _row("torch", "peer", blas_ms, 1.0)]
    return key, {"task": task, "size": size, "found": rows[0]["name"], "rows": rows,
                 "speedup_of_found": {"torch": blas_ms / found_ms},
                 "search": {"budget": 5, "sampler": "tpe", "wall_s": 3.0}}


def test_gemm_targets_are_90_percent_of_cublas_at_4096_and_80_at_the_model_shapes() -> None:
    """Each timing size is its own table (keyed 'task (size)' after the first); 85% of cuBLAS
    misses the first size's target and meets a model shape's."""
    speed = dict([_gemm("hgemm", "hgemm", "M=4096,N=4096,K=4096", 1.0, 0.85),
                  _gemm("hgemm", "hgemm (M=8192,N=14336,K=4096)", "M=8192,N=14336,K=4096", 1.0, 0.85),
                  _gemm("bgemm", "bgemm", "M=4096,N=4096,K=4096", 1.0, 0.95)])
    lines = report.targets({"speed": speed})
    assert lines == [
        "hgemm: 85.0% of cuBLAS (torch.matmul) at M=4096,N=4096,K=4096 (>= 90), 0.0 TFLOP/s — NOT MET",
        "hgemm (M=8192,N=14336,K=4096): 85.0% of cuBLAS (torch.matmul) at M=8192,N=14336,K=4096 (>= 80), "
        "0.0 TFLOP/s — met",
        "bgemm: 95.0% of cuBLAS (torch.matmul) at M=4096,N=4096,K=4096 (>= 90), 0.0 TFLOP/s — met"]


def test_side_by_side_rounds_alternate_the_order_so_no_kernel_always_follows_the_same_one() -> None:
    """On the H200 at its power cap the row right after the hopper seed timed 8-12% slower than
    the same kernel in every round of a fixed order; reversed rounds give each its neighbours on
    both sides."""
    names = ["seed", "found", "torch", "triton"]
    orders = round_orders(names, 4)
    assert orders == [names, names[::-1], names, names[::-1]]
    for name in names:
        before = {o[o.index(name) - 1] if o.index(name) else None for o in orders}
        assert len(before) == 2, (name, before)
    assert round_orders(names, 1) == [names]
