"""The result of a run: ``best.cu``, ``best.json`` and ``report.md`` in the run directory.

Everything is read back from the study, so exporting a resumed or finished run (or one
another process measured) gives the same files.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from evolve.errors import EvolveError
from evolve.evaluate.metrics import bound, headline, peak_text
from evolve.evaluate.objective import Objective
from evolve.evaluate.plan import make_plan
from evolve.evolution.llm.log import read
from evolve.hardware import Hardware
from evolve.kernel.compiler import (
    PROGRAM_NAME,
    CompileError,
    compile_cuda,
    first_error,
    nvrtc_version,
    target_arch,
)
from evolve.kernel.cubin import CubinError, inspect
from evolve.kernel.spec import Variant
from evolve.markup import c_comment, md_text
from evolve.record.schema import (
    ORIGIN,
    Attr,
    Op,
    counts_toward_budget,
    fastest_per_variant,
    flip_note,
    flipped,
    winner,
)
from evolve.record.variants import VariantStore
from evolve.results.bestpy import best_py
from evolve.results.lineage import write_lineage
from evolve.results.verify import Verification
from evolve.task.task import Task, size_label

log = logging.getLogger("evolve")


@dataclass(frozen=True)
class Summary:
    best_ms: float
    variant: str
    tunables: dict[str, int]
    baseline_ms: float | None
    baseline: str
    roofline_fraction: float
    run_dir: Path
    verified: str  # how the winner was re-measured before export, in words
    headline: str = ""  # the figure that matters: GB/s or TFLOP/s against its ceiling (metrics.headline)

    @property
    def kernel(self) -> str:
        return f"{self.variant} {_fmt(self.tunables)}".strip()

    @property
    def speedup(self) -> float | None:
        return self.baseline_ms / self.best_ms if self.baseline_ms else None

    def line(self) -> str:
        speed = (
            f" — {self.speedup:.2f}x over the best seed default ({self.baseline}: {self.baseline_ms:.4g} ms)"
            if self.speedup else ""
        )
        return (f"best {self.best_ms:.4g} ms ({self.kernel}){speed}; "
                f"{self.headline}. {self.verified} Results in {self.run_dir}/")


def export(study: optuna.Study, variants: VariantStore, task: Task, hw: Hardware,
           objective: Objective, run_dir: Path, stop_reason: str,
           checks: list[Verification] | None = None,
           sanitized: dict[str, Any] | None = None) -> Summary | None:
    """Write the run's files; None when no candidate was correct (the report says why).

    With ``checks`` (re-measurements in a fresh worker, best first), the winner is the first
    candidate that passed; without, the fastest trial (the replay backend cannot re-measure)."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(Attr.VARIANT) in variants]
    done = [t for t in trials if counts_toward_budget(t)]
    ok = [t for t in done if t.state == TrialState.COMPLETE]
    failures = Counter(t.user_attrs.get(Attr.STATUS, "?") for t in done if t.state == TrialState.FAIL)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        report = _report(study, variants, task, hw, done, ok, failures, stop_reason)
        report += _unusable_proposals(run_dir / "llm.jsonl")
        files = write_lineage(study, variants, run_dir)
        report += (f"\nLineage: [{files['table'].name}]({files['table'].name}) (table), "
                   f"[{files['svg'].name}]({files['svg'].name}) (graph); "
                   f"evolution curve: [{files['curve'].name}]({files['curve'].name}).\n")
        passed = next((c for c in checks or [] if c.passed), None)
        report += _verification_report(checks)
        report += _sanitizer_report(sanitized)
        (run_dir / "report.md").write_text(report)
        best = winner(ok, checks)
        if best is None:
            for stale in ("best.cu", "best.json", "best.py"):  # from an earlier export of this run
                (run_dir / stale).unlink(missing_ok=True)
            return None
        baseline = _baseline(ok)
        variant = variants.get(best.user_attrs[Attr.VARIANT])
        tunables = {k: int(v) for k, v in best.params.items()}
        attrs = best.user_attrs
        best_ms = best.value if passed is None else passed.time_ms
        figures = _retimed(attrs, best.value / best_ms)  # the exported time's, not the search's
        summary = Summary(
            best_ms=best_ms, variant=variant.name, tunables=tunables,
            baseline_ms=baseline.value if baseline else None,
            baseline=baseline.user_attrs.get(Attr.VARIANT_NAME, "?") if baseline else "",
            roofline_fraction=figures.get(Attr.ROOFLINE_FRACTION, 0.0),
            run_dir=run_dir,
            verified=_verified(passed, best.value),
            headline=headline(task, hw, figures),
        )
        launches = _launches(variant, task, hw, tunables)
        best_cu = _best_cu(study, task, hw, summary, launches, exported_source(variant, tunables, task))
        same_code(best_cu, variant, tunables, task, hw)
        (run_dir / "best.cu").write_text(best_cu)
        (run_dir / "best.py").write_text(best_py(task, study.study_name, hw.device or hw.name))
        (run_dir / "best.json").write_text(json.dumps({
            "run": study.study_name,
            "task": task.name,
            "hardware": hw.name,
            "device": hw.device,
            "objective": {"name": objective.name, "reduce": objective.reduce, "unit": "ms"},
            "variant": {"id": variant.id, "name": variant.name, **variants.meta[variant.id].to_dict()},
            "tunables": tunables,
            "task_config": dict(task.config),  # what best.py launches by
            "launch": {"spec": variant.spec.raw, "at": launches},
            "measurement": {k: v for k, v in attrs.items() if k not in ORIGIN},
            "time_ms": best_ms,
            "search_ms": best.value,
            "baseline": {
                "variant": summary.baseline, "time_ms": summary.baseline_ms,
                "tunables": dict(baseline.params) if baseline else None,
            },
            "speedup": summary.speedup,
            "ceiling": {**hw.measured_ceilings(), "bandwidth_ceiling_bps": hw.bandwidth_ceiling,
                        "peak_fp32_flops": hw.peak_fp32_flops, "compute_peak": task.peak,
                        "compute_peak_flops": 0.0 if task.peak == "memory" else hw.peak(task.peak),
                        "bound": bound(task, hw)},
            "trials": {"finished": len(done), "complete": len(ok), "failed": dict(failures)},
            "stop_reason": stop_reason,
            "verification": [c.to_dict() for c in checks] if checks else None,
            "sanitizer": sanitized,
            "exported": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }, indent=2, default=str) + "\n")
    except OSError as exc:
        raise EvolveError(
            f"cannot write the results to {run_dir} ({exc.strerror or exc}); the study is intact, "
            f"export again later by resuming with run.name={study.study_name} search.n_trials=0"
        ) from None
    return summary


def _retimed(attrs: dict[str, Any], factor: float) -> dict[str, Any]:
    """A trial's roofline figures for a time ``1 / factor`` of the search's."""
    rates = (Attr.GBPS, Attr.TFLOPS, Attr.BANDWIDTH_FRACTION, "compute_fraction", Attr.ROOFLINE_FRACTION)
    return {k: v * factor if k in rates and isinstance(v, int | float) else v for k, v in attrs.items()}


def _verified(passed: Verification | None, search_ms: float) -> str:
    """How the exported time was measured, in words: the re-measurement in a fresh worker is
    the one exported; a search time it does not reproduce is named, not exported."""
    if passed is None:
        return "Not re-measured (replay backend): the search's time."
    assert passed.time_ms is not None
    if passed.reproduced:
        return (f"Re-measured in a fresh worker on held-out sizes (the search measured {search_ms:.4g} ms, "
                "within the IQRs).")
    return (f"Re-measured in a fresh worker on held-out sizes; the search measured {search_ms:.4g} ms, "
            f"{100 * (search_ms / passed.time_ms - 1):+.1f}%, more than the IQRs: NOT REPRODUCED, the "
            "re-measured time is reported.")


def _sanitizer_report(sanitized: dict[str, Any] | None) -> str:
    if sanitized is None:
        return ""
    lines = ["", "## compute-sanitizer on the winner", ""]
    for tool, r in sanitized.items():
        lines.append(f"- {md_text(tool)}: {md_text(r)}" if isinstance(r, str) else
                     f"- {md_text(tool)}: {md_text(r.get('errors'))} errors")
    return "\n".join(lines) + "\n"


def _verification_report(checks: list[Verification] | None) -> str:
    if not checks:
        return "\nThe winner was not re-measured (replay backend).\n"
    out = ["", "## Re-verification of the winner", "",
           "In a fresh worker with fresh seeds, at held-out sizes "
           f"{md_text(', '.join(checks[0].sizes))}:", "",
           "| trial | status | search ms | again ms | reproduced | reason |", "|---:|---|---:|---:|---|---|"]
    for c in checks:
        again = f"{c.time_ms:.4g}" if c.time_ms is not None else "-"
        reason = md_text(c.reason[:150])
        out.append(f"| {c.trial} | {md_text(c.status)} | {c.recorded_ms:.4g} | {again} | "
                   f"{'yes' if c.reproduced else 'no'} | {reason} |")
    if not any(c.passed for c in checks):
        out += ["", "No candidate passed re-verification: nothing is exported as the best kernel."]
    return "\n".join(out) + "\n"


def _baseline(ok: list[FrozenTrial]) -> FrozenTrial | None:
    """The best seed default: the fastest seed trial."""
    return winner([t for t in ok if t.user_attrs.get(Attr.OPERATOR) == Op.SEED])


def _launches(variant: Any, task: Task, hw: Hardware, tunables: dict[str, int]) -> dict[str, Any]:
    out = {}
    for sizes in task.timing_sizes:
        plan = make_plan(variant.spec, task, sizes, tunables, hw)
        out[size_label(sizes)] = [
            {"kernel": c.kernel, "grid": c.grid, "block": c.block, "shared_bytes": c.shared,
             "args": [int(v) if kind == "int32" else v for kind, v in c.args],
             **({"cluster": c.cluster} if c.cluster else {})}
            for c in plan.calls
        ]
    return out


def exported_source(variant: Variant, tunables: Mapping[str, int], task: Task) -> str:
    """The judged source with its tunables and the task's defines baked in as #defines, then a
    ``#line`` directive, so that what follows compiles exactly as it was judged: the same
    ``__LINE__`` and ``__FILE__`` everywhere, the same line info."""
    baked = variant.with_defines(tunables, task.defines)
    prologue = baked[:len(baked) - len(variant.source)]
    return f'{prologue}#line 1 "{PROGRAM_NAME}"\n{variant.source}'


def same_code(best_cu: str, variant: Variant, tunables: Mapping[str, int], task: Task,
              hw: Hardware) -> None:
    """Refuse to export a best.cu that (compiled alone, as best.py compiles it) is not the judged
    program (its source with -D flags): every section of the two cubins but the debug line
    tables must be byte for byte the same. Where no NVRTC is installed (a proposer's machine) the
    comparison is left to the exports of the evaluators, which compiled the code."""
    try:
        nvrtc_version()
    except EvolveError as exc:
        # nothing is wrong (a replay or a proposer's machine): the evaluators' exports compare it
        log.info("best.cu not compiled here to compare with the judged code: %s", exc)
        return
    try:
        arch = target_arch(hw.arch, variant.spec.arch_specific)
        judged = inspect(compile_cuda(variant.source, {**tunables, **dict(task.defines)}, arch).cubin)
        exported = inspect(compile_cuda(best_cu, {}, arch).cubin)
    except (CompileError, CubinError) as exc:
        raise EvolveError(f"best.cu was not written: compiling it to compare with the judged code "
                          f"failed: {first_error(str(exc))}") from None
    if exported.code_digest != judged.code_digest:
        raise EvolveError(f"best.cu was not written: it does not compile to the judged code of "
                          f"{variant.name} (the cubins differ)")


def _best_cu(study: optuna.Study, task: Task, hw: Hardware, s: Summary,
             launches: dict[str, Any], source: str) -> str:
    lines = [
        f"// cuda-evolve: best kernel of run {study.study_name}, task {task.name}, "
        f"on {hw.device or hw.name}.",
        f"// {s.best_ms:.4g} ms: {s.headline}.",
        "// Tunables and the task's defines are baked in as #defines below: it compiles on its own.",
        "// best.py beside it launches it on CuPy arrays or PyTorch tensors.",
    ]
    for label, calls in launches.items():
        lines.append(f"// Launch at {label}:")
        for c in calls:
            lines.append(
                f"//   {c['kernel']}<<<{tuple(c['grid'])}, {tuple(c['block'])}, {c['shared_bytes']}>>>"
                f"({', '.join(map(str, c['args']))})"
                + (f" in clusters of {tuple(c['cluster'])}" if c.get("cluster") else "")
            )
    lines = ["// " + c_comment(line.removeprefix("// ")) for line in lines]  # names are the task's
    return "\n".join([*lines, source]) + ("\n" if not source.endswith("\n") else "")


def _unusable_proposals(path: Path) -> str:
    """The LLM proposals that gave no child to measure (a failed call, an answer that could not be
    used): failures too, though no trial records them."""
    if not path.is_file():
        return ""
    proposals = [x for x in read(path) if x.get("kind") == "proposal"]
    kinds = Counter(str(p["reason"]).split(":", 1)[0] for p in proposals
                    if p.get("reason") and not p.get("variant"))
    if not kinds:
        return ""
    return (f"\nLLM proposals: {len(proposals)}, {sum(kinds.values())} gave no child (by kind: "
            + ", ".join(f"{k} {n}" for k, n in kinds.most_common()) + "); see llm.jsonl.\n")


def _report(study: optuna.Study, variants: VariantStore, task: Task, hw: Hardware,
            done: list[FrozenTrial], ok: list[FrozenTrial], failures: Counter[str],
            stop_reason: str) -> str:
    timing = size_label(task.timing_sizes[0])
    out = [
        f"# Run {md_text(study.study_name)} — task {md_text(task.name)} on {md_text(hw.device or hw.name)}",
        "",
        md_text(task.description, one_line=False),
        "",
        f"- Timing size: {timing}; objective in milliseconds (median over samples, L2 flushed).",
        f"- Bandwidth ceiling {hw.bandwidth_ceiling / 1e9:.0f} GB/s: the faster of a measured "
        f"device-to-device copy ({(hw.copy_bandwidth_bps or 0) / 1e9:.0f} GB/s) and read-only stream "
        f"({(hw.read_bandwidth_bps or 0) / 1e9:.0f} GB/s); "
        f"{peak_text(task, hw)}; {bound(task, hw)}-bound at the timing size.",
        f"- Trials: {len(done)} finished, {len(ok)} correct, "
        f"{sum(failures.values())} failed; stopped by: {stop_reason}.",
        "",
    ]
    if failures:
        out += ["Failures by kind: " + ", ".join(f"{md_text(k)} {n}" for k, n in failures.most_common()), ""]
    out += ["## Variants", "",
            "| variant | operator | trials | failed | default ms | best ms | speedup | best tunables |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    bests = fastest_per_variant(done)
    for v in variants:
        mine = [t for t in done if t.user_attrs.get(Attr.VARIANT) == v.id]
        good = [t for t in mine if t.state == TrialState.COMPLETE]
        default = next((t.value for t in good if t.params == v.spec.default), None)
        best = bests.get(v.id)
        out.append(
            f"| {md_text(v.name)} | {md_text(variants.meta[v.id].operator)} | {len(mine)} | "
            f"{len(mine) - len(good)} | "
            f"{_ms(default)} | {_ms(best.value if best else None)} | "
            f"{f'{default / best.value:.2f}x' if best and default else '-'} | "
            f"{md_text(_fmt(best.params)) if best else '-'} |"
        )
    compute = bound(task, hw) == "compute"  # lead with the figure that matters
    rate = (("TFLOP/s", "% of peak", "tflops", "compute_fraction") if compute else
            ("GB/s", "% of bandwidth", "gbps", "bandwidth_fraction"))
    out += ["", "## Fastest trials", "",
            f"| trial | variant | ms | IQR ms | {rate[0]} | {rate[1]} | registers | occupancy | tunables |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for t in sorted(ok, key=lambda t: t.value)[:10]:
        a = t.user_attrs
        out.append(
            f"| {t.number} | {md_text(a.get(Attr.VARIANT_NAME))} | {t.value:.4g} | "
            f"{a.get(Attr.IQR_MS, 0):.2g} | "
            f"{a.get(rate[2], 0):.{1 if compute else 0}f} | {100 * a.get(rate[3], 0):.1f} | "
            f"{a.get(Attr.REGISTERS, '-')} | {a.get(Attr.OCCUPANCY, '-')} | "
            f"{md_text(_fmt(t.params))} |"
        )
    if flips := flipped(done):
        out += ["", "## Verdicts that flipped", "",
                *(f"- {md_text(flip_note(name, ok, wrong))}" for name, (ok, wrong) in sorted(flips.items()))]
    bad = [t for t in done if t.state == TrialState.FAIL][:10]
    if bad:
        out += ["", "## Failed trials (first 10)", "",
                "| trial | variant | status | reason |", "|---:|---|---|---|"]
        for t in bad:
            reason = md_text(str(t.user_attrs.get(Attr.REASON, ""))[:200])
            a = t.user_attrs
            out.append(f"| {t.number} | {md_text(a.get(Attr.VARIANT_NAME))} | "
                       f"{md_text(a.get(Attr.STATUS))} | {reason} |")
    return "\n".join(out) + "\n"


def _ms(v: float | None) -> str:
    return f"{v:.4g}" if v is not None else "-"


def _fmt(tunables: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in tunables.items())
