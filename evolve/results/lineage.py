"""Where the speed came from: the family tree of a run's variants and its progress over trials.

``lineage.md`` (a table per variant), ``lineage.svg`` (the family tree, parents left of their
children) and ``evolution.png`` (time per trial and the best so far) are read back from the
study and the variant store only, so a resumed or finished run exports the same files.
An improvement is judged as the population judges a challenger: a child counts only when its
best time beats its first parent's best by more than the measured noise.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from evolve.markup import md_text
from evolve.record.schema import Attr, Op, counts_toward_budget, fastest_per_variant
from evolve.record.variants import VariantStore
from evolve.results.curve import FAILED, IMPROVED, OPERATOR_COLORS, OTHER_COLOR, evolution_figure
from evolve.search.population import Member, noise_ms

BORDER = "#424242"
REASON_CHARS = 80
# terminal colour codes (compilers emit them) and characters XML 1.0 does not allow
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# SVG layout, in pixels
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN, HEADER = 210, 58, 60, 12, 16, 44
NAME_CHARS = 28


@dataclass(frozen=True)
class Row:
    """One variant as the lineage sees it; ``status`` is "ok" once any trial was correct."""

    id: str
    name: str
    operator: str
    parents: tuple[str, ...]  # ids, in the store's order (the first is the one compared against)
    parent_names: tuple[str, ...]
    island: int | None
    model: str
    tokens: int | None
    trials: int  # finished ones
    best_ms: float | None
    best_trial: int | None  # number of its fastest correct trial
    parent_ms: float | None  # the first parent's best
    improvement: bool
    status: str  # "ok", its first trial's status when never correct, "pending" when unmeasured
    reason: str

    @property
    def speedup(self) -> float | None:
        return self.parent_ms / self.best_ms if self.parent_ms and self.best_ms else None


def write_lineage(study: optuna.Study, variants: VariantStore, run_dir: Path) -> dict[str, Path]:
    """Write lineage.svg, lineage.md and evolution.png into run_dir; return {"svg", "table", "curve"}."""
    trials = _trials(study, variants)
    rows = _rows(trials, variants)
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = {"svg": run_dir / "lineage.svg", "table": run_dir / "lineage.md",
             "curve": run_dir / "evolution.png"}
    paths["table"].write_text(_table(study.study_name, rows), encoding="utf-8")
    paths["svg"].write_text(_svg(study.study_name, rows), encoding="utf-8")
    finished = [t for t in trials if counts_toward_budget(t)]
    improved = [(r.best_trial, r.best_ms, _clip(r.name, NAME_CHARS)) for r in rows if r.improvement]
    evolution_figure(study.study_name, finished, improved).savefig(paths["curve"])
    return paths


def lineage_rows(study: optuna.Study, variants: VariantStore) -> list[Row]:
    """The data behind the table: one row per variant, in order of first appearance."""
    return _rows(_trials(study, variants), variants)


# ---- data ---------------------------------------------------------------------------------
def _trials(study: optuna.Study, variants: VariantStore) -> list[FrozenTrial]:
    """Every trial of a known variant, queued ones too (they date a variant's creation)."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(Attr.VARIANT) in variants]
    return sorted(trials, key=lambda t: t.number)


def _rows(trials: list[FrozenTrial], variants: VariantStore) -> list[Row]:
    """A child's first trial is queued when it is created, so first trial number = birth order."""
    born = {v.id: (math.inf, i) for i, v in enumerate(variants)}
    finished: dict[str, list[FrozenTrial]] = defaultdict(list)
    for t in trials:
        vid = t.user_attrs[Attr.VARIANT]
        born[vid] = min(born[vid], (t.number, 0))
        if counts_toward_budget(t):
            finished[vid].append(t)
    bests = {vid: _member(vid, best, finished[vid])
             for vid, best in fastest_per_variant(t for ts in finished.values() for t in ts).items()}
    return [_row(vid, variants, finished[vid], bests) for vid in sorted(born, key=born.__getitem__)]


def _member(vid: str, best: FrozenTrial, trials: list[FrozenTrial]) -> Member:
    """The variant's fastest correct trial, shaped as the population keeps it (for the noise rule)."""
    n_ok = sum(t.state == TrialState.COMPLETE and t.value is not None for t in trials)
    return Member(vid, best.value, float(best.user_attrs.get(Attr.IQR_MS, 0.0)), best, n_ok)


def _row(vid: str, variants: VariantStore, trials: list[FrozenTrial], bests: dict[str, Member]) -> Row:
    meta = variants.meta[vid]
    parents = tuple(meta.parents)
    mine, parent = bests.get(vid), bests.get(parents[0]) if parents else None
    first = trials[0] if trials else None
    status = "ok" if mine else (str(first.user_attrs.get(Attr.STATUS, "?")) if first else "pending")
    return Row(
        id=vid, name=meta.name, operator=meta.operator, parents=parents,
        parent_names=tuple(variants.meta[p].name if p in variants else p for p in parents),
        island=meta.island, model=meta.model or "", tokens=meta.tokens,
        trials=len(trials), best_ms=mine.best_ms if mine else None,
        best_trial=mine.best.number if mine else None, parent_ms=parent.best_ms if parent else None,
        improvement=bool(mine and parent and mine.best_ms < parent.best_ms - noise_ms(mine, parent)),
        status=status, reason="" if mine or not first else str(first.user_attrs.get(Attr.REASON, "")),
    )


def _overall_best(rows: list[Row]) -> Row | None:
    return min((r for r in rows if r.best_ms is not None), key=lambda r: r.best_ms, default=None)


# ---- lineage.md ---------------------------------------------------------------------------
def _table(study_name: str, rows: list[Row]) -> str:
    improvements = [r for r in rows if r.improvement]
    out = [
        f"# Lineage of run {md_text(study_name)}", "",
        f"{len(rows)} variants, {sum(r.operator == Op.SEED for r in rows)} of them seeds; "
        f"{len(improvements)} improvements. A child improves when its best time beats its first "
        "parent's best by more than 2 × (IQR of the child's best trial + IQR of the parent's).", "",
        "| variant | id | operator | parents | island | model | tokens | trials | best ms | speedup "
        "| improvement | failure |",
        "|---|---|---|---|---:|---|---:|---:|---:|---:|---|---|",
    ]
    out += [_table_row(r) for r in rows]
    out += ["", "## Improvements", ""]
    out += [f"- {_cell(r.name)} ({_cell(r.operator)} of {_cell(r.parent_names[0])}): "
            f"{r.parent_ms:.4g} -> {r.best_ms:.4g} ms "
            f"({r.speedup:.2f}x)" for r in improvements] or ["None beyond the noise."]
    return "\n".join(out) + "\n"


def _table_row(r: Row) -> str:
    failure = "" if r.status == "ok" else ": ".join(filter(None, [r.status, _clip(r.reason, REASON_CHARS)]))
    cells = [  # what a candidate, model or task can set is data; the figures are ours
        _cell(r.name), _cell(r.id), _cell(r.operator), ", ".join(map(_cell, r.parent_names)) or "-",
        _or_dash(r.island), _cell(r.model) if r.model else "-", _or_dash(r.tokens), str(r.trials),
        _ms(r.best_ms), f"{r.speedup:.2f}x" if r.speedup else "-", "yes" if r.improvement else "",
        _cell(failure),
    ]
    return "| " + " | ".join(cells) + " |"


def _cell(text: str) -> str:
    """Data (names, reasons, models) as one line of literal text: never markup (evolve.markup)."""
    return md_text(_clean(text))


def _clean(text: str) -> str:
    return _CONTROL.sub("", text)


def _clip(text: str, n: int) -> str:
    text = " ".join(_clean(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _ms(v: float | None) -> str:
    return f"{v:.4g}" if v is not None else "-"


def _or_dash(v: Any) -> str:
    return "-" if v is None else str(v)


# ---- lineage.svg --------------------------------------------------------------------------
def _columns(rows: list[Row]) -> dict[str, int]:
    """Seeds in column 0, a child one right of its rightmost parent.

    Parents come first in topological order, not birth order: an unmeasured seed is born last.
    """
    parents = {r.id: r.parents for r in rows}
    col: dict[str, int] = {}
    for vid in TopologicalSorter(parents).static_order():
        if vid in parents:  # a parent missing from the store has no box
            col[vid] = 1 + max((col[p] for p in parents[vid] if p in col), default=-1)
    return col


def _layout(rows: list[Row]) -> dict[str, tuple[int, int]]:
    """Top-left corner of each box: its column, then its birth order within the column."""
    col = _columns(rows)
    filled: dict[int, int] = defaultdict(int)
    at = {}
    for r in rows:
        c = col[r.id]
        at[r.id] = (MARGIN + c * (BOX_W + GAP_X), HEADER + filled[c] * (BOX_H + GAP_Y))
        filled[c] += 1
    return at


def _svg(study_name: str, rows: list[Row]) -> str:
    at = _layout(rows)
    width = max(800, max((x for x, _ in at.values()), default=0) + BOX_W + MARGIN)
    height = max((y for _, y in at.values()), default=HEADER) + BOX_H + MARGIN
    svg = ET.Element("svg", {
        "xmlns": "http://www.w3.org/2000/svg", "width": str(width), "height": str(height),
        "viewBox": f"0 0 {width} {height}", "font-family": "monospace", "font-size": "11",
    })
    _arrows(ET.SubElement(svg, "defs"))
    ET.SubElement(svg, "rect", width="100%", height="100%", fill="white")
    best = _overall_best(rows)
    _header(svg, study_name, rows, best)
    edges = ET.SubElement(svg, "g", {"class": "edges"})
    names = {r.id: r.name for r in rows}
    for r in rows:
        for i, p in enumerate(q for q in r.parents if q in at):
            _edge(edges, at[p], at[r.id], f"{names[p]} → {r.name}", second=i > 0,
                  improved=r.improvement and i == 0)
    boxes = ET.SubElement(svg, "g", {"class": "variants"})
    for r in rows:
        _box(boxes, r, at[r.id], is_best=best is not None and r.id == best.id)
    return ET.tostring(svg, encoding="unicode") + "\n"


def _arrows(defs: ET.Element) -> None:
    for name, color in (("arrow", FAILED), ("arrow-improved", IMPROVED)):
        marker = ET.SubElement(defs, "marker", id=name, viewBox="0 0 10 10", refX="10", refY="5",
                               markerWidth="7", markerHeight="7", orient="auto")
        ET.SubElement(marker, "path", d="M0,0 L10,5 L0,10 z", fill=color)


def _header(svg: ET.Element, study_name: str, rows: list[Row], best: Row | None) -> None:
    summary = (f"best {_ms(best.best_ms)} ms ({best.name})" if best
               else "no correct variant yet" if rows else "no variants yet")
    lines = [
        (f"Lineage of run {study_name}: {len(rows)} variants, {sum(r.improvement for r in rows)} "
         f"improvements, {summary}", "13", "bold"),
        ("green border: improvement beyond noise · grey: never correct · bold: fastest · "
         "dashed edge: second crossover parent · left strip: operator", "10", "normal"),
    ]
    for i, (text, size, weight) in enumerate(lines):
        t = ET.SubElement(svg, "text", {"x": str(MARGIN), "y": str(18 + 16 * i), "font-size": size,
                                        "font-weight": weight})
        t.text = _clean(text)


def _edge(g: ET.Element, start: tuple[int, int], end: tuple[int, int], title: str, second: bool,
          improved: bool) -> None:
    """Right side of the parent to the left side of the child, as a horizontal S-curve."""
    x1, y1, x2, y2 = start[0] + BOX_W, start[1] + BOX_H // 2, end[0], end[1] + BOX_H // 2
    dx = (x2 - x1) // 2
    attrs = {
        "class": "edge", "d": f"M{x1},{y1} C{x1 + dx},{y1} {x2 - dx},{y2} {x2},{y2}", "fill": "none",
        "stroke": IMPROVED if improved else FAILED, "stroke-width": "2" if improved else "1.2",
        "marker-end": f"url(#{'arrow-improved' if improved else 'arrow'})",
    }
    if second:
        attrs["stroke-dasharray"] = "5,3"
    ET.SubElement(ET.SubElement(g, "path", attrs), "title").text = _clean(title)


def _box(g: ET.Element, r: Row, at: tuple[int, int], is_best: bool) -> None:
    x, y = at
    failed = r.status not in ("ok", "pending")
    group = ET.SubElement(g, "g", {"class": "variant", "id": f"v-{r.id}",
                                   "font-weight": "bold" if is_best else "normal"})
    ET.SubElement(group, "title").text = _clean(_tooltip(r))
    ET.SubElement(group, "rect", {
        "class": "box", "x": str(x), "y": str(y), "width": str(BOX_W), "height": str(BOX_H), "rx": "5",
        "fill": "#eeeeee" if failed else "white",
        "stroke": IMPROVED if r.improvement else FAILED if failed else BORDER,
        "stroke-width": "3" if is_best or r.improvement else "1",
        **({"stroke-dasharray": "4,3"} if r.status == "pending" else {}),
    })
    color = OPERATOR_COLORS.get(r.operator, OTHER_COLOR)
    ET.SubElement(group, "rect", {"class": "operator", "x": str(x + 2), "y": str(y + 2), "width": "5",
                                  "height": str(BOX_H - 4), "fill": color})
    trials = f"{r.trials} trial{'' if r.trials == 1 else 's'}"
    lines = [(_clip(r.name, NAME_CHARS), "12"), (f"{r.operator} · {trials}", "11"), (_outcome(r), "11")]
    for i, (text, size) in enumerate(lines):
        t = ET.SubElement(group, "text", {"x": str(x + 13), "y": str(y + 17 + 16 * i), "font-size": size,
                                          "fill": FAILED if failed else "black"})
        t.text = _clean(text)


def _outcome(r: Row) -> str:
    if r.status == "pending":
        return "not measured yet"
    if r.best_ms is None:
        return _clip(r.status, NAME_CHARS)
    return f"{_ms(r.best_ms)} ms" + (f" · {r.speedup:.2f}x" if r.speedup else "")


def _tooltip(r: Row) -> str:
    lines = [
        f"{r.name} ({r.id}): {r.operator} of {', '.join(r.parent_names) or 'nothing'}",
        f"island {_or_dash(r.island)}, model {r.model or '-'}, {_or_dash(r.tokens)} tokens, "
        f"{r.trials} trials",
        f"best {_ms(r.best_ms)} ms",
    ]
    if r.speedup:
        lines[-1] += f", {r.speedup:.2f}x its parent's {_ms(r.parent_ms)} ms"
        lines[-1] += " (improvement)" if r.improvement else " (within noise or slower)"
    if r.best_ms is None:
        lines.append(f"{r.status}: {_clip(r.reason, 300)}" if r.reason else r.status)
    return "\n".join(lines)
