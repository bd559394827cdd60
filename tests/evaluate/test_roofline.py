"""The roofline per task: a task names the peak that bounds it, hardware targets carry the datasheet
peaks, and the summary and report lead with the figure that matters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.errors import EvolveError
from evolve.evaluate.measurement import Measurement, Status, TimingStats
from evolve.evaluate.metrics import bound, headline, peak_text, roofline
from evolve.hardware import PEAKS, catalog, from_device, named
from evolve.task.task import load_task, size_label
from tests.helpers.runs import cli
from tests.helpers.tasks import H200_PROPS, hardware_config, task, task_config

H200 = named({**hardware_config("h200"), "copy_bandwidth_bps": 4.27e12, "read_bandwidth_bps": 4.6e12})


def hgemm(peak: str | None = "fp16_tensor"):
    """An fp16 tensor-core GEMM as a user would declare it."""
    cfg = task_config("sgemm")
    args = {k: {**v, "dtype": "float16"} for k, v in cfg["args"].items()}
    traffic = {**cfg["traffic"], "bytes": "2 * (M * K + K * N + M * N)"}
    if peak is not None:
        traffic["peak"] = peak
    return load_task({**cfg, "name": "hgemm", "args": args, "traffic": traffic, "tolerance": None})


def timed(t, ms: float) -> Measurement:
    stats = TimingStats(ms / 1e3, 0, ms / 1e3, 10)
    return Measurement(Status.OK, timings={size_label(t.timing_sizes[0]): stats})


@pytest.mark.parametrize("name", ["h100", "h200", "a100", "l4"])
def test_targets_carry_datasheet_peaks(name: str) -> None:
    hw = named(hardware_config(name))
    assert hw.peak("fp16_tensor") == hw.peak("bf16_tensor") > hw.peak("tf32_tensor") > hw.peak("fp32") > 0
    assert hw.peak("int8_tensor") >= hw.peak("fp16_tensor")
    assert (hw.peak("fp8_tensor") == 0) == (name == "a100")  # Ampere has no FP8 tensor cores


def test_auto_takes_every_peak_from_the_catalog() -> None:
    hw = from_device(H200_PROPS)
    assert all(hw.peak(p) == catalog()["h200"][0].peak(p) for p in PEAKS)
    assert hw.peak("fp8_tensor") == 1.979e15


def test_a_task_names_its_peak() -> None:
    assert task("sgemm").peak == "fp32" and hgemm().peak == "fp16_tensor"
    cfg = task_config("vector_add")
    assert load_task({**cfg, "traffic": {"bytes": "12 * n"}}).peak == "memory"
    with pytest.raises(EvolveError, match=r"traffic\.peak must be memory or one of fp32, fp64"):
        load_task({**cfg, "traffic": {**cfg["traffic"], "peak": "fp4_tensor"}})


def test_a_tensor_core_gemm_is_judged_by_its_own_peak() -> None:
    """The issue's case: an fp16 tensor-core GEMM at 380 TFLOP/s printed '380.0% of the roofline'."""
    t = hgemm()
    ms = 2 * 4096**3 / 380e12 * 1e3
    figures = roofline(timed(t, ms), t, H200)
    assert figures["tflops"] == pytest.approx(380, rel=1e-6)
    assert figures["compute_fraction"] == pytest.approx(380 / 989, rel=1e-6)
    assert figures["roofline_fraction"] == pytest.approx(380 / 989, rel=1e-6)
    assert bound(t, H200) == "compute"
    line = headline(t, H200, figures)
    assert line.startswith("380.0 TFLOP/s = 38.4% of the 989.0 TFLOP/s fp16_tensor datasheet peak")
    fp32 = hgemm(None)  # the old default: fp32, and so the suspicious 567%
    assert "ABOVE THE PEAK" in headline(fp32, H200, roofline(timed(fp32, ms), fp32, H200))


def test_memory_bound_tasks_lead_with_bandwidth() -> None:
    t = task("vector_add")
    figures = roofline(timed(t, 0.75), t, H200)
    assert bound(t, H200) == "memory"
    assert headline(t, H200, figures).startswith(f"{figures['gbps']:.0f} GB/s = ")
    assert "of the measured 4600 GB/s bandwidth ceiling" in headline(t, H200, figures)
    assert peak_text(load_task({**task_config("vector_add"), "traffic": {"bytes": "12 * n"}}), H200) == \
        "bounded by memory alone (no compute peak)"


def test_a_peak_the_target_lacks_is_said() -> None:
    cfg = task_config("sgemm")
    t = load_task({**cfg, "traffic": {**cfg["traffic"], "peak": "fp8_tensor"}})
    a100 = named(hardware_config("a100"))
    assert peak_text(t, a100) == "no fp8_tensor peak on the a100 datasheet: judged by memory alone"
    assert bound(t, a100) == "memory"


@pytest.mark.parametrize(("name", "lead", "header"), [
    ("sgemm", r"[\d.]+ TFLOP/s = [\d.]+% of the 67.0 TFLOP/s fp32 datasheet peak", "| TFLOP/s | % of peak |"),
    ("vector_add", r"\d+ GB/s = [\d.]+% of the measured \d+ GB/s bandwidth ceiling",
     "| GB/s | % of bandwidth |"),
])
def test_the_summary_and_report_lead_with_the_figure_that_matters(in_tmp: Path, name: str, lead: str,
                                                                  header: str) -> None:
    import re

    out = cli(f"task={name}", "backend=replay", "hardware=h200", "search.n_trials=3", "llm=none",
              f"run.name={name}-r")
    assert out.returncode == 0, out.stderr
    assert re.search(rf"^{name}: best [\d.]+ ms \(.*\); {lead}", out.stdout, re.M), out.stdout
    report = (in_tmp / "runs" / f"{name}-r" / "report.md").read_text()
    kind = "compute" if name == "sgemm" else "memory"
    assert header in report and f"{kind}-bound at the timing size" in report
    ceiling = json.loads((in_tmp / "runs" / f"{name}-r" / "best.json").read_text())["ceiling"]
    assert ceiling["bound"] == kind and ceiling["compute_peak"] == "fp32"
