"""The KernelBench section's figures from its problem records, as the field reports them, and
their rendering: per level the correctness rate, fast_p (the share of all problems whose ModelNew
is correct and more than p times as fast as the baseline) for p = 0, 1, 1.5, 2 against eager and
against each torch.compile mode, and the geometric-mean speed-up over the correct problems, both
under this tool's timing protocol and under KernelBench's; the distribution as a plot; each
failure with the run's own reason. Every text from a run (a reason, a file name) is data: it is
escaped before it reaches the Markdown."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from evolve.bench.kernelbench_measure import EAGER, MODEL_NEW

PS = (0.0, 1.0, 1.5, 2.0)
PROTOCOLS = {"ours": "median_ms", "kernelbench": "mean_ms"}  # protocol -> its time in a record
PROTOCOL_NAMES = {"ours": "this tool's (median, L2 flushed, inputs rotated)",
                  "kernelbench": "KernelBench's (mean of 100 forwards, same inputs)"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# what makes markup inside a table cell (after html.escape: no < > & left): emphasis, code, links and
# images (their brackets), the cell's end, strike-through, math
_MARKUP = re.compile(r"([\\`*_\[\]|~$])")


def speedup(rec: dict[str, Any], protocol: str, baseline: str) -> float | None:
    """How many times faster the problem's correct ModelNew is than the baseline (None: not both
    timed, or ModelNew not correct)."""
    if not rec.get("correct"):
        return None
    key = PROTOCOLS[protocol]
    new, base = (rec.get("impls", {}).get(n, {}).get(protocol) or {} for n in (MODEL_NEW, baseline))
    if not new.get(key) or not base.get(key):
        return None
    return float(base[key]) / float(new[key])


def baselines(records: Iterable[dict[str, Any]]) -> list[str]:
    """Eager, then each torch.compile mode that any record timed, in their first order."""
    seen = [EAGER]
    for r in records:
        seen += [n for n in r.get("impls", {}) if n not in (MODEL_NEW, *seen)]
    return seen


def fast_p(records: Sequence[dict[str, Any]], protocol: str, baseline: str, p: float) -> float:
    """KernelBench's fast_p over all the problems (a failed or untimed one is not fast)."""
    if not records:
        return 0.0
    fast = [r for r in records if (x := speedup(r, protocol, baseline)) is not None and x > p]
    return len(fast) / len(records)


def geomean(xs: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def correctness_rate(records: Sequence[dict[str, Any]]) -> float:
    return sum(1 for r in records if r.get("correct")) / len(records) if records else 0.0


def levels(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(str(r["level"]), []).append(r)
    return out


def summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per level (and ``all``): problems, correct, the rate, and per baseline and protocol fast_p
    and the geometric mean (with the number of problems it is over)."""
    groups = levels(records)
    if len(groups) > 1:
        groups["all"] = list(records)
    out = {}
    for level, recs in groups.items():
        vs: dict[str, Any] = {}
        for b in baselines(recs):
            for proto in PROTOCOLS:
                xs = [x for r in recs if (x := speedup(r, proto, b)) is not None]
                vs.setdefault(b, {})[proto] = {"fast": {str(p): fast_p(recs, proto, b, p) for p in PS},
                                               "geomean": geomean(xs), "n": len(xs)}
        out[level] = {"problems": len(recs), "correct": sum(1 for r in recs if r.get("correct")),
                      "correctness": correctness_rate(recs), "vs": vs}
    return out


def cell(text: object, n: int = 200) -> str:
    """Text from a run as one Markdown table cell that renders as the text itself: control
    characters dropped, whitespace folded, cut to ``n`` characters, HTML and Markdown escaped."""
    s = " ".join(_CONTROL.sub(" ", str(text)).split())
    s = s if len(s) <= n else s[: n - 1] + "…"
    return _MARKUP.sub(r"\\\1", html.escape(s, quote=False))


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _ms(row: dict[str, Any] | None, protocol: str) -> str:
    t = ((row or {}).get(protocol) or {}).get(PROTOCOLS[protocol])
    return "—" if t is None else f"{t:.4g}"


def markdown(section: dict[str, Any]) -> list[str]:
    """The section's part of results.md: the per-level tables, the problems, the failures."""
    records, summ, cfg = section["problems"], section["summary"], section.get("settings", {})
    lines = ["## KernelBench problems", "",
             f"Each problem evolved from no seed ({cfg.get('n_trials', '?')} trials, "
             f"{cfg.get('llm_calls', '?')} LLM calls, llm={cell(cfg.get('llm', '?'))}); then ModelNew, eager "
             f"and torch.compile checked against the float64 Model on {cfg.get('seeds', '?')} seeds of "
             "signed-normal inputs and timed side by side, every timed output checked. fast_p: the share of "
             "all problems whose ModelNew is correct and more than p times as fast; geomean over the "
             "correct ones.", ""]
    for level, s in summ.items():
        lines += [f"### {cell(level)}: {s['correct']} of {s['problems']} correct "
                  f"({100 * s['correctness']:.0f}%)", "",
                  "| against | timing | fast_0 | fast_1 | fast_1.5 | fast_2 | geomean (problems) |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for b, by in s["vs"].items():
            for proto, f in by.items():
                fast = " | ".join(f"{100 * f['fast'][str(p)]:.0f}%" for p in PS)
                lines.append(f"| {cell(b)} | {PROTOCOL_NAMES[proto]} | {fast} | "
                             f"{_x(f['geomean'])} ({f['n']}) |")
        lines.append("")
    names = baselines(records)
    lines += ["### Problems", "", "| problem | level | correct | ModelNew ms (ours / KB) | "
              + " | ".join(f"{cell(b)} ms (ours / KB)" for b in names)
              + " | " + " | ".join(f"vs {cell(b)} (ours / KB)" for b in names) + " |",
              "|---|---|---|" + "---:|" * (1 + 2 * len(names))]
    for r in records:
        impls = r.get("impls", {})
        times = [f"{_ms(impls.get(n), 'ours')} / {_ms(impls.get(n), 'kernelbench')}"
                 for n in (MODEL_NEW, *names)]
        ups = [f"{_x(speedup(r, 'ours', b))} / {_x(speedup(r, 'kernelbench', b))}" for b in names]
        cells = [cell(Path(r["problem"]).name), cell(r["level"]), "yes" if r.get("correct") else "no",
                 *times, *ups]
        lines.append("| " + " | ".join(cells) + " |")
    if noisy := [r for r in records if r.get("noise_floor")]:
        lines += ["", "Judged at PyTorch's own accuracy (the float64 output at the Model's own parameters "
                  "is rounding noise, which PyTorch's float32 eager misses too: each output may be off by "
                  "twice eager's largest error, no more): "
                  + ", ".join(cell(Path(r["problem"]).name) for r in noisy) + "."]
    failed = [r for r in records if not r.get("correct")]
    if failed:
        lines += ["", "### Why each failure failed", "", "| problem | stage | reason |", "|---|---|---|"]
        lines += [f"| {cell(Path(r['problem']).name)} | {cell(r['stage'])} | "
                  f"{cell(r.get('reason') or '?', 300)} |" for r in failed]
    return [*lines, ""]


def plot(section: dict[str, Any], path: Path) -> None:
    """Per level, the sorted speed-ups of the correct problems over each baseline (log scale),
    solid for this tool's protocol, dashed for KernelBench's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    groups = levels(section["problems"])
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(5.5 * max(1, len(groups)), 3.8), squeeze=False)
    for ax, (level, recs) in zip(axes.flat, groups.items(), strict=False):
        for i, b in enumerate(baselines(recs)):
            for proto, style in (("ours", "-"), ("kernelbench", "--")):
                xs = sorted((x for r in recs if (x := speedup(r, proto, b)) is not None), reverse=True)
                if xs:
                    ax.plot(range(1, len(xs) + 1), xs, linestyle=style, marker="o", ms=3, color=f"C{i}",
                            label=f"vs {b} ({'ours' if proto == 'ours' else 'KB'})")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.yaxis.set_minor_formatter(FuncFormatter(_minor))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(0.5, max(2, sum(1 for r in recs if r.get("correct"))) + 0.5)
        ax.set_title(f"{level}: {sum(1 for r in recs if r.get('correct'))} of {len(recs)} correct")
        ax.set_xlabel("correct problems, fastest first")
        ax.set_ylabel("ModelNew's speed-up")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def targets(section: dict[str, Any]) -> list[str]:
    """Issue 27's targets over all problems, under this tool's protocol: >= 90% correct and a
    geometric-mean speed-up >= 2x over each torch.compile mode."""
    records = section["problems"]
    rate = correctness_rate(records)
    out = [f"kernelbench: {100 * rate:.0f}% of {len(records)} problems correct (>= 90)"
           + (" — met" if rate >= 0.9 else " — NOT MET")]
    for b in baselines(records)[1:]:
        g = geomean([x for r in records if (x := speedup(r, "ours", b)) is not None])
        met = g is not None and g >= 2
        out.append(f"kernelbench: geomean {_x(g)} over {b} (>= 2x)" + (" — met" if met else " — NOT MET"))
    return out


def _minor(v: float, _: Any) -> str:
    """A log axis's minor labels at 2 and 5 of each decade (0.2x, 0.5x, 2x, 5x, ...)."""
    lead = round(v / 10 ** math.floor(math.log10(v))) if v > 0 else 0
    return f"{v:g}x" if lead in (2, 5) else ""
