"""What best.cu, report.md and the summary line say about the winner: the figure a task is judged
by, divided by the ceiling they name (runs on the replay backend, real SQLite)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evolve.hardware import Hardware
from tests.helpers.runs import evolve, study

GBPS = re.compile(r"([\d.]+) GB/s = ([\d.]+)% of the measured (\d+) GB/s bandwidth ceiling")
TFLOPS = re.compile(r"([\d.]+) TFLOP/s = ([\d.]+)% of the ([\d.]+) TFLOP/s fp32 datasheet peak")


def _hardware(name: str) -> Hardware:
    return Hardware.from_dict(study(name).user_attrs["hardware_spec"])


def test_a_memory_bound_result_is_divided_by_the_ceiling_it_names(
        in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """best.cu said '% of the measured copy bandwidth' but divided by the faster read-only stream."""
    evolve("task=softmax", "run.name=m", "search.n_trials=4")
    line = (in_tmp / "runs/m/best.cu").read_text().splitlines()[1]
    assert "copy" not in line
    gbps, pct, ceiling = map(float, GBPS.search(line).groups())  # type: ignore[union-attr]
    hw = _hardware("m")
    assert ceiling == round(hw.bandwidth_ceiling / 1e9) == round((hw.read_bandwidth_bps or 0) / 1e9)
    assert pct == pytest.approx(100 * gbps / ceiling, abs=0.1)
    assert GBPS.search(capsys.readouterr().out)
    assert "| GB/s | % of bandwidth |" in (in_tmp / "runs/m/report.md").read_text()


def test_a_compute_bound_result_leads_with_flops_against_the_fp32_peak(
        in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sgemm's best.cu and report.md led with '66 GB/s (1.5% of ...)'."""
    evolve("task=sgemm", "run.name=s", "search.n_trials=3")
    best = study("s").best_trial
    line = (in_tmp / "runs/s/best.cu").read_text().splitlines()[1]
    lead = TFLOPS.search(line)  # the first figure is TFLOP/s (GB/s only follows, in brackets)
    assert lead is not None and line.index("TFLOP/s") < line.index("GB/s")
    tflops, pct, peak = map(float, lead.groups())
    assert tflops == pytest.approx(best.user_attrs["tflops"], abs=0.05) and peak == 67.0
    assert pct == pytest.approx(100 * tflops / peak, abs=0.1) and pct > 40
    summary = capsys.readouterr().out
    assert TFLOPS.search(summary) and summary.index("TFLOP/s") < summary.index("GB/s")
    report = (in_tmp / "runs/s/report.md").read_text()
    assert "| TFLOP/s | % of peak |" in report and "| GB/s |" not in report
