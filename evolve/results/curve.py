"""The evolution curve of a run (``evolution.png``): time per trial by operator, the best so far,
and where a child beat its parent. Plain data in, a matplotlib Figure out; the lineage module
decides what counts as an improvement."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

from optuna.trial import FrozenTrial, TrialState

from evolve.record.schema import Attr, Op

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

OPERATOR_COLORS = {  # shared by the lineage's SVG and the curve, so one colour means one operator
    Op.SEED: "#1f77b4", Op.TUNE: "#7f7f7f", Op.MUTATE: "#ff7f0e", Op.MUTATE_DIFF: "#9467bd",
    Op.CROSSOVER: "#2ca02c", Op.REPAIR: "#d62728",
}
OTHER_COLOR = "#bcbd22"
IMPROVED, FAILED = "#2e7d32", "#9e9e9e"
Improvement = tuple[int | None, float | None, str]  # (its best trial, its best ms, the variant's name)


def evolution_figure(study_name: str, finished: list[FrozenTrial], improved: list[Improvement]) -> Figure:
    """Time per trial by operator, the best so far, and where a child beat its parent.

    A bare Figure on the Agg canvas: no pyplot, so no GUI backend, no global figure to close,
    and safe beside the run's other threads. Imported here: only exporting needs matplotlib.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 5.5), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ok = [t for t in finished if t.state == TrialState.COMPLETE and t.value is not None]
    last = finished[-1].number if finished else 0
    by_op: dict[str, list[FrozenTrial]] = defaultdict(list)
    for t in ok:
        by_op[str(t.user_attrs.get(Attr.OPERATOR, "?"))].append(t)
    for op in [o for o in OPERATOR_COLORS if o in by_op] + sorted(set(by_op) - set(OPERATOR_COLORS)):
        ts = by_op[op]
        ax.scatter([t.number for t in ts], [t.value for t in ts], s=16, zorder=2,
                   color=OPERATOR_COLORS.get(op, OTHER_COLOR), label=f"{op} ({len(ts)})")
    failed = [t.number for t in finished if t.state == TrialState.FAIL]
    if failed:  # a rug along the bottom: failures have no time
        ax.plot(failed, [0.02] * len(failed), "x", color=FAILED, markersize=4,
                transform=ax.get_xaxis_transform(), label=f"failed ({len(failed)})")
    if ok:
        _best_so_far(ax, ok, last)
        _improvements(ax, improved)
        _time_axis(ax, [t.value for t in ok])
    else:
        ax.text(0.5, 0.5, "no correct trial yet", transform=ax.transAxes, ha="center", va="center")
        ax.set_yticks([])
    ax.set_xlim(-0.5, max(last, 1) + 0.5)  # whole trial numbers even for a single trial
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Run {study_name}: time per trial")
    ax.set_xlabel("trial number")
    ax.set_ylabel("time (ms, log scale)")
    ax.grid(True, which="both", alpha=0.25)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize=8)
    return fig


def _time_axis(ax: Axes, ms: list[float]) -> None:
    """A log axis labelled in plain milliseconds ("0.3", "1", "10"), not a mix of "1e−01", "2"
    and "3.1"; with a label near the best time, the part of the plot that matters."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

    ax.set_yscale("log")
    ticks = _log_ticks(*ax.get_ylim(), best=min(ms))
    ax.yaxis.set_major_locator(FixedLocator(ticks) if ticks else MaxNLocator(nbins=6))  # within 1.5x
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.4g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


_MANTISSAS = ((1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
              (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0))


def _log_ticks(low: float, high: float, best: float) -> list[float] | None:
    """The sparsest round-number ticks in [low, high] that give at least four labels, the lowest
    within 1.5x of the best time; None where the range is too narrow for that (linear ticks then)."""
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for mantissas in _MANTISSAS:
        ticks = [float(f"{m * 10.0 ** e:.6g}") for e in decades for m in mantissas]
        ticks = [t for t in ticks if low <= t <= high]
        if len(ticks) >= 4 and ticks[0] <= 1.5 * best:
            return ticks
    return None


def _best_so_far(ax: Axes, ok: list[FrozenTrial], last: int) -> None:
    xs, ys, best = [], [], math.inf
    for t in ok:
        if t.value < best:
            best = t.value
            xs.append(t.number)
            ys.append(best)
    ax.step([*xs, last], [*ys, best], where="post", color="black", linewidth=1.2, label="best so far")


def _improvements(ax: Axes, improved: list[Improvement]) -> None:
    if not improved:
        return
    ax.scatter([t for t, _, _ in improved], [ms for _, ms, _ in improved], marker="*", s=150, zorder=3,
               facecolor="none", edgecolor=IMPROVED, linewidth=1.4, label=f"improvement ({len(improved)})")
    for trial, ms, name in improved:
        ax.annotate(name, (trial, ms), xytext=(5, 6), textcoords="offset points", fontsize=8, color=IMPROVED)
