"""Print the per-task table of a recording (seed default vs. best of the whole space), and the
evaluator's pace from the study that made it.

    python scripts/recording_table.py evolve/recordings/h200 [sqlite:///runs/record.db]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from evolve.paths import CONF_DIR
from evolve.task.task import load_task, size_label


def main(folder: Path, storage: str | None) -> None:
    print("| task | seeds' best default | ms | tuned best | ms | speedup | GB/s | % of ceiling | TFLOP/s |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    for path in sorted(folder.glob("*.jsonl")):
        task = load_task(yaml.safe_load((CONF_DIR / "task" / f"{path.stem}.yaml").read_text()))
        label = size_label(task.timing_sizes[0])
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        c = next(x for x in lines if x["kind"] == "ceiling")
        ceiling = max(c.get("copy_bandwidth_bps", 0), c.get("read_bandwidth_bps", 0))
        defaults = {v.id: v.spec.default for v in task.seeds()}
        ok = [x for x in lines if x["kind"] == "measurement" and x["measurement"]["status"] == "ok"]
        t = {id(x): x["measurement"]["timings"][label]["median_s"] for x in ok}
        base = min((x for x in ok if defaults.get(x["variant"]) == x["tunables"]), key=lambda x: t[id(x)])
        best = min(ok, key=lambda x: t[id(x)])
        tb, tt = t[id(base)], t[id(best)]
        nbytes, flops = task.bytes(task.timing_sizes[0]), task.flops(task.timing_sizes[0])
        cfg = " ".join(f"{k}={v}" for k, v in best["tunables"].items())
        print(f"| {task.name} | {base['name']} | {tb * 1e3:.4g} | {best['name']} {cfg} | {tt * 1e3:.4g} | "
              f"{tb / tt:.2f}x | {nbytes / tt / 1e9:.0f} | {100 * nbytes / tt / ceiling:.1f} | "
              f"{flops / tt / 1e12:.2f} |")
    if storage:
        import optuna

        total_n = total_s = 0.0
        for s in optuna.get_all_study_summaries(storage):
            if s.study_name.startswith("_"):
                continue
            study = optuna.load_study(study_name=s.study_name, storage=storage)
            n, secs = len(study.trials), study.user_attrs.get("elapsed_s", 0.0)
            total_n, total_s = total_n + n, total_s + secs
            print(f"{s.study_name}: {n} candidates in {secs:.1f} s = {60 * n / secs:.0f}/min")
        print(f"all: {total_n:.0f} candidates in {total_s:.1f} s = {60 * total_n / total_s:.0f} per minute")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
