"""Hydra multiruns (sweeps): one study per job, and one table of the jobs when the sweep ends.

Every job of a sweep is its own run: its name is the run name with the job number appended,
whether the name is the default or was given with ``run.name``, so no two jobs ever share a study
(a job that "resumed" another would report that one's result as its own). A sweep run again with
the same ``run.name`` resumes each job. Evaluator jobs (``role=evaluate``, e.g. ``-m evaluator=0,1,2,3``)
are the exception by design: they are the evaluators of the one study ``run.name`` names.

Hydra writes ``multirun.yaml`` into the sweep's own folder (``runs/sweeps/<date-time>/``); each job
appends its outcome to ``jobs.jsonl`` beside it, and when the sweep ends a Hydra callback prints
them as one table (also written there as ``summary.md``) with the command that opens them in
optuna-dashboard.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from evolve.markup import md_text
from evolve.record.storage import dashboard_command

JOBS = "jobs.jsonl"
SUMMARY = "summary.md"


def job_suffix(role: str) -> str:
    """``-<job number>`` for a job of a sweep (not for an evaluator joining a study), else ''."""
    try:
        hc = HydraConfig.get()
    except ValueError:
        return ""
    return f"-{hc.job.num}" if hc.mode == RunMode.MULTIRUN and role != "evaluate" else ""


def job_dir(run_dir: str, role: str) -> str:
    """``hydra.sweep.subdir``: a job's Hydra output (its log, ``.hydra/``) goes to its run
    directory, not under the sweep's folder (absolute, so Hydra does not join the two)."""
    return os.path.abspath(f"{run_dir}{job_suffix(role)}")


OmegaConf.register_new_resolver("evolve.job_dir", job_dir, replace=True)


def name_job(cfg: DictConfig) -> None:
    """Give a sweep's job its own run name and directory (see :func:`job_suffix`)."""
    suffix = job_suffix(str(cfg.role))
    if suffix:
        run_dir = f"{cfg.run.dir}{suffix}"  # read before the name changes: it may refer to it
        cfg.run.name = f"{cfg.run.name}{suffix}"
        cfg.run.dir = run_dir


def in_sweep() -> bool:
    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False


def record_job(run_name: str, run_dir: str, *, best_ms: float | None = None, kernel: str = "",
               trials: int | None = None, error: str = "") -> None:
    """A sweep's job: add its row to the sweep's table (nothing outside a sweep)."""
    if not in_sweep():
        return
    hc = HydraConfig.get()
    row = {"job": hc.job.num, "overrides": list(hc.overrides.task), "run": run_name, "dir": run_dir,
           "best_ms": best_ms, "kernel": kernel, "trials": trials, "error": error}
    with open(Path(str(hc.sweep.dir)) / JOBS, "a") as f:
        f.write(json.dumps(row) + "\n")


class LauncherCheck(Callback):
    """A sweep that submits its jobs to SLURM needs SLURM's commands here: without them, one line
    (was: submitit's traceback, 'are you indeed on a slurm cluster?')."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        target = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
        if "submitit" in target and "Slurm" in target and not shutil.which("sbatch"):
            print("evolve: this launcher submits the jobs to SLURM, and this machine has no sbatch: run "
                  "the sweep on the cluster's login node (on one node: -m hydra/launcher=joblib)",
                  file=sys.stderr)
            sys.exit(2)


class SweepSummary(Callback):
    """Prints the table of a sweep's jobs when it ends; exits with 2 if a job failed."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        folder = Path(str(config.hydra.sweep.dir))
        path = folder / JOBS
        if not path.is_file():
            return
        rows = sorted((json.loads(line) for line in path.read_text().splitlines() if line.strip()),
                      key=lambda r: r["job"])
        swept = swept_keys(list(config.hydra.overrides.task))
        storage = OmegaConf.to_container(config.storage, resolve=True)
        table = format_table(rows, swept)
        dashboard = ""
        if not all(r["error"] for r in rows):
            dashboard = f"Compare them (one study per job) in the dashboard: {dashboard_command(storage)}\n"
        markdown = markdown_table(rows, swept)
        (folder / SUMMARY).write_text(f"# Sweep {folder.name}\n\n{markdown}\n{dashboard}")
        print(f"\nSweep {folder} ({len(rows)} jobs):\n{table}\n{dashboard}", end="")
        if any(r["error"] for r in rows):
            sys.exit(2)


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys a sweep varies (``task=a,b``, ``search.sampler=choice(tpe,random)``, ...)."""
    return [o.get_key_element() for o in OverridesParser.create().parse_overrides(overrides)
            if o.is_sweep_override()]


def _values(row: dict[str, Any]) -> dict[str, str]:
    parsed = OverridesParser.create().parse_overrides(row["overrides"])
    return {o.get_key_element(): o.get_value_element_as_str() for o in parsed}


def _cells(row: dict[str, Any], swept: list[str], clip: int | None = None) -> list[str]:
    values = _values(row)
    error = row["error"] if clip is None or len(row["error"]) <= clip else row["error"][:clip - 1] + "…"
    outcome = (f"{row['best_ms']:.4g}" if row["best_ms"] is not None else "-",
               f"failed: {error}" if row["error"] else row["kernel"] or "no correct candidate",
               "-" if row["trials"] is None else str(row["trials"]))
    return [str(row["job"]), *(values.get(k, "") for k in swept), *outcome, row["dir"]]


def _header(swept: list[str]) -> list[str]:
    return ["job", *swept, "best ms", "kernel", "trials", "run directory"]


def format_table(rows: list[dict[str, Any]], swept: list[str]) -> str:
    """For the terminal: a failed job's reason is cut (each job printed it whole when it ended)."""
    lines = [_header(swept), *(_cells(r, swept, clip=60) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def markdown_table(rows: list[dict[str, Any]], swept: list[str]) -> str:
    head = _header(swept)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    # a failed job's reason can quote a compiler or a model: every cell is data (evolve.markup)
    lines += ["| " + " | ".join(c if c == "-" else md_text(c) for c in _cells(r, swept)) + " |" for r in rows]
    return "\n".join(lines) + "\n"
