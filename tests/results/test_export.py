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


LINE_KERNEL = """// c = a + b + (__LINE__ % 3) - 1: right when judged, off if the exported file shifts lines.
/*@evolve
kernels:
  - name: add_line
    grid: ceil_div(n, BLOCK)
    block: BLOCK
    args: [a, b, c, n]
tunables:
  BLOCK: {values: [128, 256], default: 256}
*/
extern "C" __global__ void add_line(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + (float)(__LINE__ % 3) - (float)(13 % 3);
}
"""


def test_best_cu_compiles_to_the_judged_code_even_where_it_uses_the_line_number() -> None:
    """best.cu put its defines before the judged source, so __LINE__ (and the line info) differed
    from what was measured: a kernel honest when judged was wrong as exported (issue 24.5)."""
    from evolve.hardware import named
    from evolve.kernel.compiler import compile_cuda
    from evolve.kernel.cubin import inspect
    from evolve.kernel.spec import Variant
    from evolve.results.export import exported_source, same_code
    from tests.helpers.tasks import hardware_config, task

    t, hw, v = task("vector_add"), named(hardware_config("h200")), Variant.parse(LINE_KERNEL, name="line")
    best_cu = "// a header of comments, as best.cu has\n// two\n" + exported_source(v, {"BLOCK": 128}, t)
    assert '#line 1 "kernel.cu"' in best_cu
    same_code(best_cu, v, {"BLOCK": 128}, t, hw)  # no error: byte for byte the judged cubin
    judged = inspect(compile_cuda(LINE_KERNEL, {"BLOCK": 128}, "sm_90").cubin).code_digest
    assert inspect(compile_cuda(best_cu, {}, "sm_90").cubin).code_digest == judged


def test_the_export_refuses_a_best_cu_that_compiles_to_other_code() -> None:
    from evolve.errors import EvolveError
    from evolve.hardware import named
    from evolve.kernel.spec import Variant
    from evolve.results.export import same_code
    from tests.helpers.tasks import hardware_config, task

    t, hw, v = task("vector_add"), named(hardware_config("h200")), Variant.parse(LINE_KERNEL, name="line")
    old_style = v.with_defines({"BLOCK": 128}, t.defines)  # what best.cu was: defines, then the source
    with pytest.raises(EvolveError, match=r"not compile to the judged code of line \(the cubins differ"):
        same_code(old_style, v, {"BLOCK": 128}, t, hw)


def test_an_exported_best_cu_carries_the_line_directive(in_tmp: Path) -> None:
    evolve("task=softmax", "run.name=ln", "search.n_trials=2")
    text = (in_tmp / "runs/ln/best.cu").read_text()
    assert '#define BLOCK' in text and '\n#line 1 "kernel.cu"\n' in text
