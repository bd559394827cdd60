"""The ``evolve-bench`` command (Hydra app, configuration in ``conf-bench/``): kernel speed
against PyTorch, torch.compile, CuPy/cuBLAS and Triton; search efficiency against Kernel Tuner on
recorded spaces; evaluator throughput. Writes results.json, results.md and PNG plots."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
import optuna
from omegaconf import DictConfig, OmegaConf

from evolve import __version__, version_line
from evolve.bench import report
from evolve.bench.throughput import Throughput
from evolve.bench.timer import TimerSettings
from evolve.errors import EvolveError
from evolve.paths import BENCH_CONF_DIR, install_command

log = logging.getLogger("evolve.bench")
SECTIONS = ("speed", "efficiency", "throughput", "agent", "overhead", "kernelbench")


def run(cfg: DictConfig) -> dict[str, Any]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    c: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    unknown = set(c["sections"]) - set(SECTIONS)
    if unknown:
        raise EvolveError(f"unknown bench section(s) {sorted(unknown)}; choose from {list(SECTIONS)}")
    out = Path(c["out"])
    kernelbench = _kernelbench_problems(c) if "kernelbench" in c["sections"] else None  # before the GPU
    gpu = bool({"speed", "throughput", "overhead", "kernelbench"} & set(c["sections"]))
    previous = out / "results.json"  # sections measured earlier into the same folder are kept
    results: dict[str, Any] = json.loads(previous.read_text()) if previous.is_file() else {}
    results.update({"date": dt.date.today().isoformat(), "preset": c.get("preset"),
                    "tool": f"cuda-evolve {__version__}",
                    "environment": {**results.get("environment", {}), **_environment(gpu)}})
    results.setdefault("config", {}).update({k: c[k] for k in c["sections"]})
    try:
        if "speed" in c["sections"]:
            results["speed"] = {}
            for task, res in _speed(c, out):
                results["speed"][task] = res
                report.write(results, out)
        if "efficiency" in c["sections"]:
            results["efficiency"] = _efficiency(c["efficiency"], out)
            report.write(results, out)
        if "throughput" in c["sections"]:
            results["throughput"] = _throughput(c, out, results.get("speed"))
        if "agent" in c["sections"]:
            results["agent"] = _agent(c["agent"])
        if "overhead" in c["sections"]:
            from evolve.bench.overhead import call_overhead

            o = c["overhead"]
            results["overhead"] = call_overhead(list(o["tasks"]), dict(o["sizes"]), out, int(o["calls"]))
        if kernelbench is not None:
            _kernelbench(results, kernelbench, out)
    finally:  # what was measured so far is kept, whatever stops the bench
        report.write(results, out)
    for line in report.targets(results):
        print(line)
    print(f"results: {out}/results.md, results.json, *.png")
    return results


def _speed(c: dict[str, Any], out: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    from evolve.bench.speed import kernel_speed

    s = c["speed"]
    yield from kernel_speed(list(s["tasks"]), out, _hardware(), int(s["budget"]), str(s["sampler"]),
                            list(s["compile_modes"]), TimerSettings(**s["timer"]), list(s["overrides"]),
                            dict(s["runs"] or {}))


def _kernelbench_problems(c: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The section's settings and problem files, refused in one line before anything runs."""
    from evolve.bench import kernelbench

    s = kernelbench.Settings.from_config(c["kernelbench"])
    return s, kernelbench.find_problems(s.problems, s.levels)


def _kernelbench(results: dict[str, Any], settings_problems: tuple[Any, list[Any]], out: Path) -> None:
    """Problem by problem, the report rewritten after each (a cut bench keeps what is done)."""
    from evolve.bench.kernelbench import run_problems
    from evolve.bench.kernelbench_report import summary

    s, problems = settings_problems
    section = results["kernelbench"] = {"settings": results["config"]["kernelbench"], "problems": [],
                                        "summary": {}}
    for rec in run_problems(problems, s):
        section["problems"].append(rec)
        section["summary"] = summary(section["problems"])
        report.write(results, out)


def _agent(a: dict[str, Any]) -> dict[str, Any]:
    from evolve.bench import agent

    if not a["runs"]:
        raise EvolveError("sections=[agent] needs agent.runs, the evolve runs to read (bench.yaml)")
    summaries = [agent.summarize(Path(r["dir"]), r.get("storage") or a["storage"],
                                 r.get("artifacts") or a["artifacts"]) for r in a["runs"]]
    return {"runs": [s.to_dict() for s in summaries], "table": agent.table(summaries)}


def _efficiency(e: dict[str, Any], out: Path) -> dict[str, Any]:
    from evolve.bench import efficiency

    spaces = {}
    for name in e["spaces"]:
        task, variant = name.split("/")
        log.info("efficiency: %s: %d seeds x %d evaluations per method", name, e["seeds"], e["budget"])
        space = efficiency.RecordedSpace.load(e["hardware"], task, variant)
        spaces[name] = efficiency.compare(space, list(e["ours"]), list(e["theirs"]), int(e["budget"]),
                                          int(e["seeds"]), out / "kernel_tuner", climb=bool(e["climb"]))
    efficiency.plot(spaces, out / "efficiency.png")
    return {"spaces": spaces, "table": efficiency.table(spaces)}


def _throughput(c: dict[str, Any], out: Path, speed: dict[str, Any] | None) -> dict[str, Any]:
    from evolve.bench.versus import evolve_rate, kernel_tuner_rate

    t = c["throughput"]
    res: dict[str, Any] = {}
    if speed:
        # one search per task, however many sizes it was timed at
        searches = [s["search"]["throughput"] for key, s in speed.items() if key == s.get("task", key)]
        res["mix"] = _mix(searches)
    task, variant = t["space"].split("/")
    n = int(t["candidates"])
    vs: dict[str, Any] = {"space": t["space"], "candidates": n}
    log.info("throughput: cuda-evolve on %s, %d candidates", t["space"], n)
    vs["cuda-evolve"] = evolve_rate(task, variant, n, out)
    if t.get("kernel_tuner"):
        log.info("throughput: Kernel Tuner on %s, %d candidates", t["space"], n)
        try:
            vs["kernel_tuner"] = kernel_tuner_rate(task, variant, n, seed=0)
        except ImportError:
            vs["kernel_tuner"] = f"not installed ({install_command('bench')})"
    res["versus"] = vs
    return res


def _mix(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum of several runs' throughputs, each run on one GPU."""
    fields = ("candidates", "wall_s", "compile_s", "check_s", "timing_s", "storage_s", "other_s",
              "evaluator_s")
    total = Throughput(**{k: type(parts[0][k])(sum(p[k] for p in parts)) for k in fields}, evaluators=1)
    return total.to_dict()


def _hardware() -> Any:
    """This GPU, its bandwidth ceilings measured now (in a worker, as the search does)."""
    from evolve.evaluate.backend import create_backend
    from evolve.hardware import Hardware
    from evolve.task.task import builtin_task

    backend = create_backend({"name": "cupy", "device": 0, "timing": {}})
    try:
        hw = backend.start(builtin_task("vector_add"), None)
        return Hardware.from_dict({**hw.to_dict(), **backend.measure_ceilings()})
    finally:
        backend.close()


def _environment(gpu: bool) -> dict[str, str]:
    env = {"python": platform.python_version()}
    for mod in ("torch", "cupy", "kernel_tuner", "optuna"):
        with contextlib.suppress(ImportError):
            env[mod] = __import__(mod).__version__
    if gpu:
        import subprocess

        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            raise EvolveError("the speed, throughput and kernelbench sections need an NVIDIA GPU (nvidia-smi "
                              "not found); "
                              "sections=[efficiency] and sections=[agent] run without one") from None
        if q.returncode == 0 and q.stdout.strip():
            env["gpu"], env["driver"] = (x.strip() for x in q.stdout.splitlines()[0].split(","))
    return env


@hydra.main(version_base="1.3", config_path=str(BENCH_CONF_DIR), config_name="bench")
def _app(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except EvolveError as exc:
        print(f"evolve-bench: {exc}".splitlines()[0], file=sys.stderr)
        sys.exit(2)


def main() -> None:
    if sys.argv[1:] == ["--version"]:  # ours, not Hydra's
        print(version_line())
        return
    _app()
