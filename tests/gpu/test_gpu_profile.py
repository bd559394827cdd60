"""evolution.profile on the GPU (pytest -m gpu): Nsight Compute really profiles a candidate in
the worker, its figures agree with what the kernel must move, and a run with a real
OpenAI-protocol server on loopback puts the parent's profile into the prompt."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from evolve.app.run import run
from evolve.evaluate import profile
from evolve.evaluate.cupy_backend import CupyBackend
from evolve.evolution.llm.log import read
from evolve.kernel.spec import Variant
from evolve.paths import CONF_DIR, KERNELS_DIR
from evolve.search import profiler
from tests.helpers.llm import llm_args
from tests.helpers.openai_server import OpenAIServer, Reply, kernel_answer
from tests.helpers.runs import gone, marked, study
from tests.helpers.tasks import task


def test_a_candidates_profile_counts_the_bytes_it_must_move() -> None:
    t = task("vector_add")
    seed = next(v for v in t.seeds() if v.name == "naive")
    sizes = t.timing_sizes[0]
    b = CupyBackend({"timeout_s": 120, "timing": {}})
    try:
        b.start(t, None)
        p = b.profile(seed, seed.spec.default, sizes)
        assert p is not None and "error" not in p, p
        n = sizes["n"]
        assert p["dram_read_bytes"] == pytest.approx(8 * n, rel=0.1)  # a and b, once
        assert p["dram_write_bytes"] == pytest.approx(4 * n, rel=0.1)  # c
        assert p["dram_pct"] > 50 and p["kernels"] == 1 and p["stalls"]
        assert b.evaluate(seed, seed.spec.default, [sizes]).ok  # the worker is still serving
        assert "Nsight Compute profile" in profile.describe(p)
    finally:
        b.close()


def test_with_profile_on_the_prompt_carries_the_parents_profile(in_tmp: Path, llm_env: None) -> None:
    from hydra import compose, initialize_config_dir

    block_row = (KERNELS_DIR / "softmax/block_row.cu").read_text()
    with OpenAIServer(lambda r: Reply(kernel_answer(block_row))) as server:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[
                "task=softmax", "run.name=gp", "search.n_trials=8", "search.seed=7", "search.progress=false",
                f"task.seeds=[{KERNELS_DIR / 'softmax/naive.cu'}]", "evolution.profile=true",
                "search.verify=false", *llm_args(server, "llm.max_calls=1")])
        run(cfg)
    call = next(x for x in read(in_tmp / "runs/gp/llm.jsonl") if x["kind"] == "call")
    prompt = call["messages"][1]["content"]
    assert "Nsight Compute profile" in prompt and "DRAM read" in prompt and "top warp stalls" in prompt
    recorded = profiler.recorded(study("gp"))
    assert recorded and all("error" not in p for p in recorded.values()), recorded


SPIN = """/*@evolve
kernels:
  - {name: spin_forever, grid: 1, block: 32, args: [a, b, c, n]}
*/
extern "C" __global__ void spin_forever(const float* a, const float* b, float* c, int n) {
    while (n > 0) { c[0] = a[0]; }  // never ends for any size the task has
}
"""


def test_a_profile_past_its_time_limit_is_stopped_with_its_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only this test's processes are looked for (marked in their environment): under ``-n 8`` the
    killed-search test profiles a kernel that never ends at the same time."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv("EVOLVE_TEST_MARK", mark)
    t = task("vector_add")
    seed = next(v for v in t.seeds() if v.name == "naive")
    b = CupyBackend({"timeout_s": 120, "timing": {}, "profile_timeout_s": 20})
    try:
        b.start(t, None)
        p = b.profile(Variant.parse(SPIN), {}, t.timing_sizes[0])
        assert p is not None and "took longer than 20 s" in p["error"], p
        mine = marked("EVOLVE_TEST_MARK", mark, "evolve.evaluate.gpu.profiling")
        left = [pid for pid in mine if not gone(pid, 5)]
        assert not left, f"the profiled process outlived its time limit: {left}"
        assert b.evaluate(seed, seed.spec.default, t.timing_sizes[:1]).ok
    finally:
        b.close()
