"""The bench's outputs: results.json (everything measured), results.md (the tables and whether
each target holds) and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evolve.markup import md_text

MEMORY_BOUND = ("vector_add", "reduce_sum", "softmax", "layernorm", "transpose")


def _torch_peer(name: str) -> bool:
    """PyTorch eager ("torch") or one of its torch.compile modes ("torch.compile (<mode>)")."""
    return name == "torch" or name.startswith("torch.compile")


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "results.md").write_text(markdown(results))
    if results.get("speed"):
        plot_speed(results["speed"], out / "speed.png")
    if results.get("throughput"):
        plot_throughput(results["throughput"], out / "throughput.png")
    if (results.get("kernelbench") or {}).get("problems"):
        from evolve.bench.kernelbench_report import plot

        plot(results["kernelbench"], out / "kernelbench.png")
    if results.get("agent"):
        from evolve.bench.agent import AgentSummary, figure

        runs = results["agent"]["runs"]
        figure([AgentSummary(**{**r, "curve": [tuple(p) for p in r["curve"]]}) for r in runs]).savefig(
            out / "agent.png", dpi=120)


def markdown(r: dict[str, Any]) -> str:
    env = r.get("environment", {})
    lines = [f"# evolve-bench ({r.get('preset', '?')}), {r.get('date', '?')}", "",
             ", ".join(f"{k}: {v}" for k, v in env.items()), ""]
    if r.get("speed"):
        lines += _speed(r["speed"])
    if r.get("efficiency"):
        lines += ["## Search efficiency on recorded spaces", "", r["efficiency"]["table"], ""]
    if r.get("throughput"):
        lines += _throughput(r["throughput"])
    if r.get("agent"):
        lines += ["## What the model did (from the runs' record)", "", r["agent"]["table"], ""]
    if r.get("overhead"):
        lines += ["## Call overhead from PyTorch (best.py, ModelNew, the custom op, the torch op; "
                  "host: back-to-back calls nothing waits for; wall: with the GPU's work)", "",
                  r["overhead"]["table"], ""]
    if (r.get("kernelbench") or {}).get("problems"):
        from evolve.bench.kernelbench_report import markdown as kernelbench_markdown

        lines += kernelbench_markdown(r["kernelbench"])
    lines += ["## Targets", "", *(f"- {t}" for t in targets(r)), ""]
    return "\n".join(lines)


def _speed(speed: dict[str, Any]) -> list[str]:
    lines = ["## Kernel speed (timing size, median of interleaved rounds, L2 flushed before each call)", ""]
    for task, s in speed.items():
        srch = s["search"]
        lines += [f"### {task} ({s['size']}); search: {srch['budget']} trials of {srch['sampler']}, no LLM, "
                  f"{srch['wall_s']:.0f} s", "",
                  "| implementation | median ms | IQR ms | GB/s | TFLOP/s | % of ceiling | % of copy "
                  "| cuda-evolve's speedup over it |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in s["rows"]:
            if "ms" not in row:
                lines.append(f"| {md_text(row['name'])} | {md_text(row['error'])} | | | | | | |")
                continue
            sp = s["speedup_of_found"].get(row["name"])
            lines.append(
                f"| {row['name']} | {row['ms']:.4f} | {row['iqr_ms']:.4f} | {row['gbps']:.0f} | "
                f"{row['tflops']:.2f} | {row['pct_ceiling']:.1f} | {_tenths(row.get('pct_copy'))} | "
                f"{'—' if sp is None else f'{sp:.2f}x'} |")
        lines.append("")
    return lines


def _throughput(t: dict[str, Any]) -> list[str]:
    lines = ["## Evaluator throughput", ""]
    mix = t.get("mix")
    if mix:
        lines += [f"Realistic mix (the speed section's searches, all tasks): {mix['candidates']} candidates, "
                  f"{mix['per_min']:.0f} per minute per GPU; time: "
                  + ", ".join(f"{k} {100 * v:.0f}%" for k, v in mix["shares"].items()), ""]
    vs = t.get("versus")
    if vs:
        lines += [f"Head to head on {vs['space']} ({vs['candidates']} random candidates, "
                  "correctness checked, candidates' compile caches cold; each tool warmed up first by a "
                  "short run, not counted):", "",
                  "| tool | candidates | wall s | per minute | best ms | warm-up s |",
                  "|---|---:|---:|---:|---:|---:|"]
        for tool in ("cuda-evolve", "kernel_tuner"):
            x = vs.get(tool)
            if isinstance(x, dict) and "per_min" in x:
                lines.append(f"| {tool} | {x['candidates']} | {x['wall_s']:.1f} | {x['per_min']:.1f} | "
                             f"{_num(x.get('best_ms'))} | {_tenths(x.get('warmup_s'))} |")
            elif x:
                lines.append(f"| {tool} | {x} | | | | |")
        lines.append("")
    return lines


def targets(r: dict[str, Any]) -> list[str]:
    """Each target of the benchmark, met or not, with the figure that decides it."""
    out = []
    for task, s in (r.get("speed") or {}).items():
        rows = {row["name"]: row for row in s["rows"] if "ms" in row}
        found = rows.get(s["found"])
        if found is None:
            out.append(f"{task}: the found kernel was not timed — NOT MET")
            continue
        if task in MEMORY_BOUND:
            pct = found.get("pct_copy") or 0.0
            peers = [p for p in rows if _torch_peer(p)]
            faster = [p for p in peers if rows[p]["ms"] < found["ms"]]
            missing = [p for p in ("torch", "torch.compile") if not any(q.startswith(p) for q in peers)]
            ok = pct >= 90 and not faster and not missing
            out.append(f"{task}: {pct:.1f}% of copy bandwidth (>= 90), "
                       + ", ".join(f"{s['speedup_of_found'][p]:.2f}x vs {p}" for p in peers)
                       + (f" ({', '.join(missing)} not timed)" if missing else "")
                       + (" — met" if ok else " — NOT MET")
                       + "".join(f"; {_margin(found, rows[p])} than {p}" for p in faster))
        elif task == "sgemm":
            blas = next((n for n in rows if n.startswith("cuBLAS")), None)
            if blas:
                frac = rows[blas]["ms"] / found["ms"]
                out.append(f"sgemm: {100 * frac:.1f}% of cuBLAS fp32 (>= 80), {found['tflops']:.1f} TFLOP/s"
                           + (" — met" if frac >= 0.8 else " — NOT MET"))
        elif s.get("task", task) in ("hgemm", "bgemm") and "torch" in rows:  # torch.matmul: cuBLAS
            goal = 0.9 if s.get("task", task) == task else 0.8  # 4096^3; the model shapes after it
            frac = rows["torch"]["ms"] / found["ms"]
            out.append(f"{task}: {100 * frac:.1f}% of cuBLAS (torch.matmul) at {s['size']} "
                       f"(>= {100 * goal:.0f}), "
                       f"{found['tflops']:.1f} TFLOP/s" + (" — met" if frac >= goal else " — NOT MET"))
    eff = r.get("efficiency")
    if eff:
        for space, res in eff["spaces"].items():
            methods = res.get("methods", {})
            done = {k: v for k, v in methods.items() if "median_evals_to_95" in v}
            ours = {k: v for k, v in done.items() if k.startswith("cuda-evolve")}
            theirs = {k: v for k, v in done.items() if k.startswith("kernel_tuner")}
            if not ours or not theirs:
                continue
            # the default sampler (what a user gets), else the best of those compared
            best_name, best = (("cuda-evolve:tpe", ours["cuda-evolve:tpe"]) if "cuda-evolve:tpe" in ours
                               else min(ours.items(), key=lambda kv: kv[1]["median_evals_to_95"]))
            beaten = [k for k, v in theirs.items() if best["median_evals_to_95"] < v["median_evals_to_95"]]
            out.append(f"search on {space}: {best_name} reaches 95% of the optimum in a median of "
                       f"{best['median_evals_to_95']:g} evaluations; fewer than {len(beaten)} of "
                       f"{len(theirs)} Kernel Tuner strategies"
                       + (" — met" if len(beaten) == len(theirs) else " — NOT MET"))
    if (r.get("kernelbench") or {}).get("problems"):
        from evolve.bench.kernelbench_report import targets as kernelbench_targets

        out += kernelbench_targets(r["kernelbench"])
    vs = (r.get("throughput") or {}).get("versus") or {}
    ours, kt = vs.get("cuda-evolve"), vs.get("kernel_tuner")
    if isinstance(ours, dict) and isinstance(kt, dict) and kt.get("per_min"):
        ratio = ours["per_min"] / kt["per_min"]
        out.append(f"throughput: {ratio:.2f}x Kernel Tuner's candidates per minute (>= 2)"
                   + (" — met" if ratio >= 2 else " — NOT MET"))
    return out


def plot_speed(speed: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(speed)
    ncols = min(3, len(tasks))
    nrows = -(-len(tasks) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks, strict=False):
        rows = [r for r in speed[task]["rows"] if "ms" in r]
        fastest = min(r["ms"] for r in rows)
        colors = {"seed": "#9e9e9e", "found": "#2e7d32", "peer": "#1565c0"}
        ax.barh([_short(r["name"]) for r in rows], [fastest / r["ms"] for r in rows],
                color=[colors[r["kind"]] for r in rows])
        ax.set_xlim(0, 1.05)
        ax.set_title(task)
        ax.set_xlabel("speed relative to the fastest")
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _short(name: str) -> str:
    """A bar label: whole up to 44 characters (the torch.compile modes fit), else cut."""
    return name if len(name) <= 44 else name[:43] + "…"


def plot_throughput(t: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    mix = t.get("mix")
    if mix:
        left = 0.0
        for k, v in mix["shares"].items():
            a1.barh(["cuda-evolve"], [100 * v], left=left, label=k)
            left += 100 * v
        a1.set_xlabel("% of evaluator time")
        a1.legend(fontsize=7, loc="lower right")
        a1.set_title("where the time goes")
    vs = t.get("versus") or {}
    tools = [k for k in ("cuda-evolve", "kernel_tuner") if isinstance(vs.get(k), dict) and "per_min" in vs[k]]
    a2.bar(tools, [vs[k]["per_min"] for k in tools], color=["#2e7d32", "#1565c0"][: len(tools)])
    a2.set_ylabel("candidates per minute")
    a2.set_title(f"head to head on {vs.get('space', '?')}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _tenths(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def _margin(found: dict[str, Any], peer: dict[str, Any]) -> str:
    """How much slower the found kernel is, and whether that is inside the measurements' noise
    (the larger of the two IQRs): a difference that small is a tie, but still not 'as fast'."""
    gap = found["ms"] - peer["ms"]
    noise = max(found.get("iqr_ms") or 0.0, peer.get("iqr_ms") or 0.0)
    return f"{100 * gap / peer['ms']:.1f}% slower" + (" (inside the IQRs)" if gap <= noise else "")


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"
