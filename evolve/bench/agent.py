"""What a model did in evolve runs, read back from their record (no GPU): how many of its children
compiled, passed (at once, or after one repair) and beat their parent, how many repairs worked,
tokens per call, and the best time against LLM calls. The numbers behind the README's
real-model table (``evolve-bench sections=[agent] agent.runs=[...]``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.artifacts import FileSystemArtifactStore

from evolve.errors import EvolveError
from evolve.evolution.llm.log import read
from evolve.record.schema import Attr, Op
from evolve.record.variants import VariantStore
from evolve.results.lineage import lineage_rows

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CHILD_OPERATORS = (Op.MUTATE, Op.MUTATE_DIFF, Op.CROSSOVER, Op.WRITE)  # new children; repairs apart


@dataclass(frozen=True)
class AgentSummary:
    run: str
    task: str
    calls: int  # LLM calls made (llm.jsonl)
    tokens_per_call: float  # prompt and completion, mean
    children: int  # new children that reached the evaluator
    no_kernel: int  # proposals whose answer held no usable kernel
    compiled: int
    passed: int  # correct at their first measurement
    passed_after_repair: int  # correct, or made correct by their one repair
    beat_parent: int  # beat their first parent by more than the noise (the lineage's rule)
    repairs: int
    repairs_ok: int
    seed_ms: float | None  # the seeds' best, tuned
    best_ms: float | None
    curve: list[tuple[int, float]]  # (LLM calls whose children were measured, best ms so far)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(run_dir: Path, storage: str, artifacts: str) -> AgentSummary:
    """One run: its study (named in best.json), its variants and its llm.jsonl."""
    try:
        best = json.loads((run_dir / "best.json").read_text())
        log = read(run_dir / "llm.jsonl")
        study = optuna.load_study(study_name=best["run"], storage=storage)
    except (OSError, ValueError, KeyError) as exc:
        raise EvolveError(f"agent.runs: {run_dir} is not a finished evolve run with an LLM ({exc})") from None
    variants = VariantStore(study, FileSystemArtifactStore(artifacts))
    variants.load()
    rows = lineage_rows(study, variants)
    measured = [r for r in rows if r.status != "pending"]  # children still queued are not counted
    children = [r for r in measured if r.operator in CHILD_OPERATORS]
    repairs = [r for r in measured if r.operator == Op.REPAIR]
    repaired_ok = {r.parents[0] for r in repairs if r.status == "ok" and r.parents}
    calls = [e for e in log if e.get("kind") == "call"]
    proposals = [e for e in log if e.get("kind") == "proposal"]
    seeds = [r.best_ms for r in rows if r.operator == Op.SEED and r.best_ms is not None]
    first = _first_status(study)
    return AgentSummary(
        run=best["run"], task=best["task"], calls=len(calls),
        tokens_per_call=(sum(int(c["prompt_tokens"]) + int(c["completion_tokens"]) for c in calls)
                         / len(calls)) if calls else 0.0,
        children=len(children), no_kernel=sum(1 for p in proposals if not p.get("variant")),
        compiled=sum(1 for r in children if r.status in COMPILED),
        passed=sum(1 for r in children if first.get(r.id) == "ok"),
        passed_after_repair=sum(1 for r in children if r.status == "ok" or r.id in repaired_ok),
        beat_parent=sum(1 for r in children if r.improvement),
        repairs=len(repairs), repairs_ok=sum(1 for r in repairs if r.status == "ok"),
        seed_ms=min(seeds) if seeds else None,
        best_ms=min((r.best_ms for r in rows if r.best_ms is not None), default=None),
        curve=_curve(study, proposals))


# statuses only a compiled candidate gets (a not_recorded or rejected child was never compiled)
COMPILED = frozenset({"ok", "launch_error", "wrong", "timeout", "crashed"})


def _first_status(study: optuna.Study) -> dict[str, str]:
    """Each variant's status at its first measurement (before any repair of it)."""
    first: dict[str, str] = {}
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if (status := t.user_attrs.get(Attr.STATUS)) is not None:
            first.setdefault(t.user_attrs.get(Attr.VARIANT, ""), status)
    return first


def _curve(study: optuna.Study, proposals: list[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """Best time so far against the LLM calls whose children have been measured, trial by trial
    (a call is counted once its child's first trial is finished)."""
    calls_of: dict[str, int] = {}  # variant id -> LLM calls spent up to and including its proposal
    spent = 0
    for p in sorted(proposals, key=lambda p: int(p["index"])):
        spent += len(p.get("calls") or [])
        if p.get("variant"):
            calls_of[p["variant"]] = spent
    points, best, seen = [], float("inf"), 0
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if t.value is None:
            continue
        seen = max(seen, calls_of.get(t.user_attrs.get(Attr.VARIANT, ""), 0))
        if t.value < best or (points and points[-1][0] != seen):
            best = min(best, t.value)
            points.append((seen, best))
    return points


def table(summaries: list[AgentSummary]) -> str:
    lines = ["| task | LLM calls | tokens/call | children | compiled | passed | passed (≤1 repair) "
             "| beat parent | repairs that worked | no kernel | seed tuned ms | best ms | speedup |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summaries:
        speedup = f"{s.seed_ms / s.best_ms:.2f}x" if s.seed_ms and s.best_ms else "—"
        cells = [s.task, str(s.calls), f"{s.tokens_per_call:.0f}", str(s.children),
                 *(_share(k, s.children) for k in (s.compiled, s.passed, s.passed_after_repair)),
                 str(s.beat_parent), f"{s.repairs_ok}/{s.repairs}", str(s.no_kernel), _ms(s.seed_ms),
                 _ms(s.best_ms), speedup]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _share(k: int, n: int) -> str:
    return f"{k} ({100 * k / n:.0f}%)" if n else str(k)


def figure(summaries: list[AgentSummary]) -> Figure:
    """Best time (relative to the tuned seed) against LLM calls, one line per run."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for s in summaries:
        if not s.curve or not s.seed_ms:
            continue
        xs, ys = zip(*s.curve, strict=True)
        ax.step(xs, [s.seed_ms / y for y in ys], where="post", label=s.task)
    ax.set_xlabel("LLM calls (children measured)")
    ax.set_ylabel("speedup over the tuned seed")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"
