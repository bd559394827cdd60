"""The evaluation protocol on the GPU (pytest -m gpu): held-out sizes really reach the worker,
integer outputs are judged, search times agree with an independent timing, and candidates that
used to stop a run end as their own status while the run goes on."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from evolve.evaluate.cupy_backend import CupyBackend
from evolve.evaluate.measurement import Status
from evolve.kernel.spec import Variant
from evolve.paths import KERNELS_DIR, ROOT
from evolve.results.verify import holdout_sizes
from evolve.task.task import load_task
from tests.helpers.tasks import task

ADVERSARIAL = ROOT / "tests" / "adversarial"

SEARCH_SIZES_ONLY = """/*@evolve
kernels:
  - {name: add_known_sizes, grid: "ceil_div(n, 256)", block: 256, args: [a, b, c, n]}
*/
extern "C" __global__ void add_known_sizes(const float* a, const float* b, float* c, int n) {
    // right at the sizes the search checks and times, wrong anywhere else
    const bool known = n == 1 || n == 2 || n == 3 || n == 1000 || n == 4097 || n == 33334
                       || n == 1000003 || n == 268435456;
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = known ? a[i] + b[i] : a[i] - b[i];
}
"""


def test_verification_checks_at_the_held_out_sizes() -> None:
    """Step 5 re-checks the winner at sizes it never saw: the worker must use them."""
    t = task("vector_add")
    v = Variant.parse(SEARCH_SIZES_ONLY)
    b = CupyBackend({"timeout_s": 120, "timing": {}})
    try:
        b.start(t, None)
        assert b.evaluate(v, {}, t.timing_sizes[:1]).ok  # it passes the search's own check
        b.close()
        b.start(dataclasses.replace(t, correctness_sizes=tuple(holdout_sizes(t))), None)
        m = b.evaluate(v, {}, t.timing_sizes[:1])
        assert m.status is Status.WRONG and "n=4," in m.reason + ",", m.reason
    finally:
        b.close()


ARGMAX = """/*@evolve
kernels:
  - {name: argmax_rows, grid: "ceil_div(rows, 128)", block: 128, args: [x, idx, rows, cols]}
*/
extern "C" __global__ void argmax_rows(const float* x, int* idx, int rows, int cols) {
    int r = blockIdx.x * 128 + threadIdx.x;
    if (r >= rows || SKIP_LAST && r == rows - 1) return;
    int best = 0;
    const float* row = x + (long long)r * cols;
    for (int j = 1; j < cols; ++j) best = row[j] > row[best] ? j : best;
    idx[r] = best + OFF_BY;
}
"""


def test_an_integer_output_task_is_judged_exactly(tmp_path: Path) -> None:
    """An int32 output used to crash the worker (outputs were pre-filled with NaN)."""
    seed = tmp_path / "argmax.cu"
    seed.write_text(ARGMAX)
    results = {}
    for name, defines in (("right", {}), ("skips", {"SKIP_LAST": 1}), ("off", {"OFF_BY": 1})):
        t = load_task({
            "name": "argmax_rows", "reference": "tests.helpers.task_refs:argmax_rows",
            "args": {"x": {"role": "input", "shape": ["rows", "cols"]},
                     "idx": {"role": "output", "dtype": "int32", "shape": ["rows"]}},
            "sizes": {"correctness": [{"rows": 1, "cols": 1}, {"rows": 3, "cols": 5},
                                      {"rows": 1000, "cols": 33}],
                      "timing": [{"rows": 65536, "cols": 1024}]},
            "tolerance": {"atol": 0, "rtol": 0, "l2": 0},
            "traffic": {"bytes": "4 * rows * cols + 4 * rows"},
            "seeds": [str(seed)],
            "defines": {"SKIP_LAST": 0, "OFF_BY": 0, **defines},
        })
        v = t.seeds()[0]
        b = CupyBackend({"timeout_s": 120, "timing": {}})
        try:
            b.start(t, None)
            results[name] = b.evaluate(v, {}, t.timing_sizes[:1])
        finally:
            b.close()
    assert results["right"].ok, results["right"].reason
    assert results["skips"].status is Status.WRONG and "not written" in results["skips"].reason
    assert results["off"].status is Status.WRONG and "differ" in results["off"].reason


@pytest.mark.parametrize(("name", "seed"), [("reduce_sum", "vectorized"), ("vector_add", "vectorized"),
                                            ("layernorm", "two_pass")])
@pytest.mark.timing
def test_search_times_agree_with_an_independent_timing(name: str, seed: str) -> None:
    """Nothing may touch the candidate's memory between the L2 flush and the timed launch: an
    earlier harness checksummed the inputs there, which left tens of MB of them in the L2 and made
    search times optimistic. Independent timing: L2 flushed right before each launch, events,
    30 samples, in this process."""
    import cupy as cp

    from evolve.evaluate.gpu.harness import GpuEvaluator
    from evolve.evaluate.gpu.timing import TimingSettings
    from evolve.evaluate.measurement import TimingStats

    t = task(name)
    v = next(x for x in t.seeds() if x.name == seed)
    b = CupyBackend({"timeout_s": 120, "timing": {}})
    try:
        hw = b.start(t, None)
        searched = [b.evaluate(v, v.spec.default, t.timing_sizes[:1]) for _ in range(2)]
    finally:
        b.close()
    assert all(m.ok for m in searched)
    sizes = t.timing_sizes[0]
    inputs = t.make_inputs(cp, sizes, 5)
    outputs = {a.name: cp.empty(t.shape(a, sizes), a.dtype) for a in t.outputs}
    ev = GpuEvaluator(t, hw, TimingSettings(), secret=1)
    launch = ev.launcher(v.source, v.spec.default, sizes, {**inputs, **outputs})
    flush = cp.empty(2 * hw.l2_bytes, dtype=cp.uint8)
    for _ in range(10):
        launch()
    samples = []
    for _ in range(30):
        flush.fill(0xA5)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    independent = TimingStats.of(samples)
    for m in searched:
        s = next(iter(m.timings.values()))
        bound = max(0.015, 2 * (s.rel_iqr + independent.rel_iqr))
        print(f"{name}/{seed}: search {s.median_s * 1e3:.4f} ms (IQR {s.iqr_s * 1e3:.4f}), "
              f"independent {independent.median_s * 1e3:.4f} ms (IQR {independent.iqr_s * 1e3:.4f})")
        assert abs(s.median_s / independent.median_s - 1) <= bound


def test_candidates_that_stopped_runs_end_as_their_own_status(in_tmp: Path) -> None:
    """A whole run with seeds that used to raise out of the evaluation (or to be missed): the run
    finishes, each has its status and reason in the study, and the honest seed wins."""
    bad = {"device_memory_oom.cu": "rejected", "shared_static_plus_dynamic.cu": "launch_error",
           "param_struct.cu": "rejected", "checksum_permutation.cu": "wrong"}
    seeds = [str(KERNELS_DIR / "vector_add/naive.cu"), *(str(ADVERSARIAL / f) for f in bad)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-m", "evolve", "task=vector_add", "run.name=hostile", "search.progress=false",
         "llm=none", "search.n_trials=8", f"task.seeds=[{','.join(seeds)}]"],
        capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    study = optuna.load_study(study_name="hostile", storage="sqlite:///runs/evolve.db")
    by_name = {t.user_attrs["variant_name"]: t for t in study.trials
               if t.user_attrs.get("operator") == "seed"}
    for file, status in bad.items():
        trial = by_name[Path(file).stem]
        assert trial.user_attrs["status"] == status, (file, trial.user_attrs.get("reason"))
        assert trial.user_attrs.get("reason")
    assert study.best_trial.user_attrs["variant_name"] == "naive"
    assert (in_tmp / "runs/hostile/best.cu").is_file()
