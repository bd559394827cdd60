"""The adversarial suite: kernels that cheat or break, each rejected with a specific reason.

On the CPU, every case whose verdict needs no GPU is checked through the same functions the
evaluator uses (source checks, launch planning, NVRTC). On the GPU (``pytest -m gpu``), every case
goes through the real evaluator, and a correct kernel must still pass right after it (the worker
survived or was restarted). The GPU run writes the table to ``$EVOLVE_ADVERSARIAL_TABLE`` if set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from evolve.errors import SpecError
from evolve.evaluate.plan import make_plan, param_mismatch
from evolve.hardware import named
from evolve.kernel.compiler import CompileError, SourceRejected, check_source, compile_cuda
from evolve.kernel.cubin import inspect
from evolve.kernel.spec import Variant
from tests.helpers.tasks import hardware_config, task

HERE = Path(__file__).parent / "adversarial"
CASES: list[dict[str, Any]] = yaml.safe_load((HERE / "cases.yaml").read_text()) if HERE.is_dir() else []
IDS = [c["file"] for c in CASES]


def test_the_suite_is_large_enough() -> None:
    assert len(CASES) >= 20
    assert {e for c in CASES for e in _options(c)} >= {"wrong", "rejected", "compile_error", "launch_error",
                                                       "timeout", "crashed"}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cases_decided_before_the_gpu(case: dict[str, Any]) -> None:
    """Every verdict a CPU can reach (source checks, spec, plans, NVRTC, the compiled module's
    symbols, memory and parameter layout) is the expected one, with the expected reason."""
    verdict = _cpu_verdict(case)
    if verdict is None:
        decided_later = {"wrong", "ok", "timeout", "crashed", "launch_error"}
        assert set(_options(case)) & decided_later or "time" in case["reason"], case["file"]
        return
    status, reason = verdict
    assert status in _options(case), reason
    assert re.search(case["reason"], reason, re.I), reason


def _cpu_verdict(case: dict[str, Any]) -> tuple[str, str] | None:
    """The evaluator's verdict where no GPU is needed, in its order of steps; None past them."""
    source = (HERE / case["file"]).read_text()
    t = task(case["task"])
    if reason := check_source(source):
        return "rejected", reason
    try:
        v = Variant.parse(source)
    except SpecError as exc:
        return "rejected", str(exc)
    hw = named(hardware_config("h200"))
    try:
        plans = [make_plan(v.spec, t, sizes, case["tunables"], hw)
                 for sizes in (*t.correctness_sizes, *t.timing_sizes)]
    except SpecError as exc:
        return "launch_error", str(exc)
    if "time" in case["reason"].lower():
        return None  # a compile bomb that only the time limit stops (minutes of NVRTC here)
    try:
        cubin = compile_cuda(source, {**case["tunables"], **dict(t.defines)}, "sm_90", cache=False).cubin
    except SourceRejected as exc:
        return "rejected", str(exc)
    except CompileError as exc:
        return "compile_error", str(exc)
    info = inspect(cubin)
    for plan in plans:
        if reason := param_mismatch(plan, info):
            return "rejected", reason
    missing = [launch.kernel for launch in v.spec.launches if launch.kernel not in info.params]
    if missing:
        return "compile_error", f"kernel {missing[0]!r} not found"
    return None


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    yield made
    for b, _ in made.values():
        b.close()


ROWS: list[str] = []


@pytest.mark.timing
@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_adversarial_case_is_rejected_and_the_worker_survives(case: dict[str, Any], backends: dict) -> None:
    from evolve.evaluate.cupy_backend import CupyBackend

    name = case["task"]
    if name not in backends:
        t = task(name)
        b = CupyBackend({"timeout_s": 30, "compile_timeout_s": 60, "timing": {}})
        b.start(t, None)
        backends[name] = (b, t)
    b, t = backends[name]
    source = (HERE / case["file"]).read_text()
    try:
        v: Any = Variant.parse(source)
    except SpecError:  # a malformed spec: the worker must refuse it itself
        v = SimpleNamespace(source=source, name=case["file"], spec=SimpleNamespace(arch_specific=False))
    m = b.evaluate(v, case["tunables"], t.timing_sizes[:1])
    seed = t.seeds()[0]
    alive = b.evaluate(seed, seed.spec.default, t.timing_sizes[:1])
    timed = "; ".join(f"{t.median_s * 1e3:.4g} ms, n={t.n}" for t in m.timings.values())
    observed = (m.reason or timed)[:140].replace("|", "/")
    ROWS.append(f"| {case['file']} | {_cell(case['trick'])} | {_cell(_expected(case))} | "
                f"{m.status.value}: {observed} | {'yes' if alive.ok else 'NO'} |")
    table = os.environ.get("EVOLVE_ADVERSARIAL_TABLE")
    if table:
        Path(table).write_text("| kernel | trick | expected | observed | worker alive after |\n"
                               "|---|---|---|---|---|\n" + "\n".join(ROWS) + "\n")
    assert m.status.value in _options(case), m.reason or timed
    assert re.search(case["reason"], m.reason, re.I), m.reason
    assert alive.ok, alive.reason
    if m.ok:  # allowed only where the trick ended up timing honest work: no fake speed-up
        cheat = next(iter(m.timings.values())).median_s
        if "honest" in case:  # the same kernel, honest: the trick must not beat it
            twin = b.evaluate(v, case["honest"], t.timing_sizes[:1])
            assert twin.ok, twin.reason
            honest = next(iter(twin.timings.values())).median_s
            assert cheat >= 0.95 * honest, f"{cheat * 1e3:.4g} ms vs its honest twin's {honest * 1e3:.4g} ms"
        else:
            honest = next(iter(alive.timings.values())).median_s
            assert cheat >= 0.5 * honest, f"{cheat * 1e3:.4g} ms vs the naive seed's {honest * 1e3:.4g} ms"


def _options(case: dict[str, Any]) -> list[str]:
    """``expect`` may list several verdicts where the compiler version decides (e.g. a ptxas warning)."""
    return case["expect"] if isinstance(case["expect"], list) else [case["expect"]]


def _cell(text: str) -> str:
    """Text in a markdown table's cell: a regular expression's ``|`` would end the cell."""
    return text.replace("|", "\\|")


def _expected(case: dict[str, Any]) -> str:
    return f"{' or '.join(_options(case))}: {case['reason']}"
