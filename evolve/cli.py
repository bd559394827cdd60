"""The ``evolve`` command: a Hydra app that wires configuration to the search.

Configuration lives in ``conf/`` (groups task, hardware, objective, search, storage, backend);
this module only assembles the parts, and turns every problem a user can fix into one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import hydra
import optuna
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from evolve import __version__
from evolve.backends import Backend, create_backend
from evolve.backends.sanitize import sanitize
from evolve.correctness import admit
from evolve.errors import EvolveError
from evolve.evolution import EvolutionSettings, Proposer
from evolve.export import export
from evolve.hardware import Hardware, named
from evolve.llm.budget import LLMBudget
from evolve.llm.factory import create_llm
from evolve.llm.log import ExchangeLog
from evolve.llm.replay import ReplayLLM
from evolve.objective import Objective
from evolve.paths import CONF_DIR
from evolve.prompts import Prompts
from evolve.recording import RecordingWriter
from evolve.search import Search, SearchSettings
from evolve.storage import cached_ceilings, open_storage, store_ceilings
from evolve.task import Task, load_task
from evolve.tasks import command_line_name, list_tasks, register_task_files, with_task_dir
from evolve.variants import VariantStore
from evolve.verify import Verification, verify

log = logging.getLogger("evolve")


def _job_suffix() -> str:
    """Jobs of one multirun share a timestamp; their number keeps run names apart."""
    try:
        hc = HydraConfig.get()
    except ValueError:
        return ""
    return f"-{hc.job.num}" if hc.mode == RunMode.MULTIRUN else ""


OmegaConf.register_new_resolver("evolve.job_suffix", _job_suffix, replace=True)


def run(cfg: DictConfig) -> float | None:
    """One run: returns the best time in ms (what a Hydra sweeper would minimize)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    c: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    if c["backend"]["name"] == "check":  # no GPU, no study: check the task and say what is wrong
        from evolve.backends.check import check_task

        if check_task(c):
            sys.exit(1)
        return None
    task = load_task(with_task_dir(c["task"]))
    admit(task)
    objective = Objective.from_config(c["objective"])
    settings = SearchSettings.from_config(c["search"])
    if settings.seed is not None and int(c.get("worker", 0)):  # evaluators must not propose alike
        settings = dataclasses.replace(settings, seed=settings.seed + int(c["worker"]))
    storage, artifacts = open_storage(c["storage"])
    target = None if c["hardware"]["name"] == "auto" else named(c["hardware"])
    role = str(c.get("role", "all"))
    helpers = _start_workers(c) if role == "all" else []
    if helpers:  # the evaluators are the helper processes: this one proposes, waits and exports
        role = "propose"
    backend = None if role == "propose" else create_backend(c["backend"])
    stop = "interrupted"
    try:
        if backend is None:  # a proposer needs no GPU: it works with the evaluators' hardware
            hw = _stored_hardware(storage, c["run"]["name"], helpers) or target
            if hw is None:
                raise EvolveError("role=propose needs hardware=<name> until an evaluator has created the run")
        else:
            hw = _with_ceilings(backend.start(task, target), backend, storage)
        study = _open_study(storage, c["run"]["name"], task, objective, hw, c)
        variants = VariantStore(study, artifacts)
        variants.load()
        callbacks = []
        if c["backend"].get("record"):
            callbacks.append(RecordingWriter(Path(c["backend"]["record"]), hw, task.name).add)
        evolution = EvolutionSettings.from_config(c["evolution"])
        search = Search(study, variants, backend, task, objective, hw, settings, callbacks, evolution,
                        role=role)
        search.add_seeds(task.seeds())
        run_dir = Path(c["run"]["dir"])
        if role != "evaluate":
            _attach_llm(search, c, task, hw, run_dir, settings.seed)
        if not task.seed_paths and search.proposer is None and role != "evaluate":
            raise EvolveError(f"task {task.name} has no seed kernels and no LLM to write the first one: add "
                              "seeds: [...] to the task, or choose llm=openai, llm=local or llm=mailbox")
        if role == "propose" and search.proposer is None and not helpers:
            raise EvolveError("role=propose needs an LLM: choose llm=openai or llm=local")
        if helpers and search.proposer is None:  # our evaluators need not wait for children
            study.set_user_attr("proposer", {"state": "done", "reason": "no LLM"})
        with contextlib.suppress(KeyboardInterrupt):
            if role == "propose" and search.proposer is not None:
                stop = search.run_proposer()
            elif role != "propose":
                stop = search.run()
            if helpers:
                stop = _wait(helpers)
        checks = None
        if role == "all" or helpers:
            checks = _verify(c, backend, stop, task, hw, objective, variants, study)
        sanitized = None
        winner = next((ch for ch in checks or [] if ch.passed), None)
        if winner is not None and c["search"].get("sanitize"):
            t = study.trials[winner.trial]
            log.info("running compute-sanitizer (memcheck, racecheck) on the winner")
            sanitized = sanitize(task, hw, variants.get(t.user_attrs["variant"]),
                                 {k: int(v) for k, v in t.params.items()})
        summary = export(study, variants, task, hw, objective, run_dir, stop, checks, sanitized)
    finally:
        if backend is not None:
            backend.close()
        for p in helpers:
            if p.poll() is None:
                p.terminate()
    if summary is None:
        print(f"{task.name}: no correct candidate yet; see {run_dir}/report.md", file=sys.stderr)
    else:
        print(f"{task.name}: {summary.line()}")
    if stop == "interrupted":
        print(f"interrupted: resume with  evolve task={command_line_name(task.config)} "
              f"run.name={study.study_name}",
              file=sys.stderr)
        sys.exit(130)
    return summary.best_ms if summary else None


def _verify(c: dict[str, Any], backend: Backend | None, stop: str, task: Task, hw: Hardware,
            objective: Objective, variants: VariantStore, study: optuna.Study) -> list[Verification] | None:
    """Step 5, in a fresh worker, when the run measured on a GPU and was not interrupted."""
    if c["backend"]["name"] == "replay" or stop == "interrupted" or not c["search"].get("verify", True):
        return None
    if backend is not None:
        backend.close()  # one GPU, one worker at a time
    fresh = create_backend({**c["backend"], "device": 0})
    return verify(fresh, task, hw, objective, variants, _ranked(study))


def _start_workers(c: dict[str, Any]) -> list[subprocess.Popen[bytes]]:
    """``workers=N|auto``: one ``role=evaluate`` process per GPU of this node, each pinned with
    CUDA_VISIBLE_DEVICES, all on this run's study. Optuna's storage is the only link."""
    workers = c.get("workers", 1)
    if workers in (1, "1", None):
        return []
    gpus = _visible_gpus()
    n = len(gpus) if workers == "auto" else int(workers)
    if n < 1:
        raise EvolveError("workers=auto found no GPU (nvidia-smi lists none)")
    if c["storage"].get("kind") == "rdb" and str(c["storage"].get("url", "")).startswith("sqlite"):
        raise EvolveError("several evaluators need storage=postgres (or storage=journal on one node)")
    overrides = [o for o in HydraConfig.get().overrides.task
                 if not o.startswith(("workers=", "role=", "worker=", "run.name="))]
    overrides += [f"--config-dir={s.path}" for s in HydraConfig.get().runtime.config_sources
                  if s.provider == "command-line"]  # where an --config-dir task lives
    procs = []
    for i in range(n):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)] if gpus else str(i)}
        pin = ["backend.device=0"] if "device" in c["backend"] else []  # the one GPU it sees
        cmd = [sys.executable, "-m", "evolve", *overrides, "role=evaluate", "workers=1", f"worker={i}",
               *pin, f"run.name={c['run']['name']}", "search.progress=false"]
        procs.append(subprocess.Popen(cmd, env=env))
    log.info("started %d evaluator process(es) on GPU(s) %s", n, ", ".join(gpus) or "0..")
    return procs


def _visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def _wait(procs: list[subprocess.Popen[bytes]]) -> str:
    codes = [p.wait() for p in procs]
    if any(codes):
        raise EvolveError(f"evaluator process(es) failed with exit codes {codes}")
    return "budget"


def _stored_hardware(storage: optuna.storages.BaseStorage, name: str,
                     helpers: list[subprocess.Popen[bytes]]) -> Hardware | None:
    """The hardware an evaluator recorded in the run's study; with helper processes of our own,
    wait for the first of them to create the run."""
    deadline = time.monotonic() + 600
    while True:
        try:
            spec = optuna.load_study(study_name=name, storage=storage).user_attrs.get("hardware_spec")
        except KeyError:
            spec = None
        if spec or not helpers or time.monotonic() > deadline or all(p.poll() is not None for p in helpers):
            return Hardware.from_dict(spec) if spec else None
        time.sleep(0.5)


def _ranked(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Correct trials, fastest first, one per candidate."""
    seen, out = set(), []
    correct = [t for t in study.get_trials(deepcopy=False) if t.value is not None]
    for t in sorted(correct, key=lambda t: t.value):
        key = (t.user_attrs.get("variant"), tuple(sorted(t.params.items())))
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _attach_llm(search: Search, c: dict[str, Any], task: Task, hw: Hardware, run_dir: Path,
                seed: int | None) -> None:
    """Give the search an LLM proposer, if the configuration (or the environment) names one."""
    llm, why_not = create_llm(c["llm"])
    if llm is None:
        log.info("%s", why_not)
        return
    caps = {k: c["llm"].get(k) for k in ("max_calls", "max_tokens", "max_cost_usd")}
    if isinstance(llm, ReplayLLM):
        caps = llm.caps or caps  # the recorded run's caps, so that it stops where it stopped
    budget = LLMBudget(search.study, caps["max_calls"], caps["max_tokens"], caps["max_cost_usd"])
    evo = search.evo
    exchanges = ExchangeLog(run_dir / "llm.jsonl")
    exchanges.write("run", model=llm.model, **caps)
    search.proposer = Proposer(
        search, llm, budget, Prompts(task, hw, evo.prompts), exchanges, evo,
        seed=seed, threads=int(c["llm"].get("concurrency") or 1),
    )
    if isinstance(llm, ReplayLLM):
        search.replay = sorted(llm.proposals, key=lambda p: p["index"])
    log.info("LLM %s proposes children (%s)", llm.model, "replayed" if search.replay is not None else
             f"caps: {budget.max_calls} calls, {budget.max_tokens} tokens, ${budget.max_cost}")


def _with_ceilings(hw: Hardware, backend: Backend, storage: optuna.storages.BaseStorage) -> Hardware:
    """Measured bandwidths: from the target or recording, the storage cache, or measured now."""
    if hw.measured_ceilings():
        return hw
    key = backend.ceiling_key()
    ceilings = cached_ceilings(storage, key)
    if ceilings is None:
        log.info("measuring the bandwidth ceilings of %s (once; cached in the storage)", key)
        ceilings = backend.measure_ceilings()
        store_ceilings(storage, key, ceilings)
    return Hardware.from_dict({**hw.to_dict(), **ceilings})


def _open_study(storage: optuna.storages.BaseStorage, name: str, task: Task,
                objective: Objective, hw: Hardware, c: dict[str, Any]) -> optuna.Study:
    """Create the run's study, or resume it if it describes the same search."""
    study = optuna.create_study(
        study_name=name, storage=storage, load_if_exists=True, direction="minimize",
        sampler=optuna.samplers.RandomSampler(),  # params are always fixed by the proposer
    )
    identity = {
        "task": task.name, "task_fingerprint": task.fingerprint(),
        "objective": objective.name, "hardware": hw.name,
    }
    old = {k: study.user_attrs.get(k) for k in identity}
    if any(old[k] is not None and old[k] != v for k, v in identity.items()):
        diff = ", ".join(f"{k}: {old[k]} -> {v}" for k, v in identity.items() if old[k] != v)
        raise EvolveError(f"run {name} exists with a different setup ({diff}); choose another run.name")
    if any(v is None for v in old.values()):  # new, or being created by another process right now
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["time_ms"])
        for k, v in identity.items():
            study.set_user_attr(k, v)
        study.set_user_attr("device", hw.device)
        study.set_user_attr("hardware_spec", hw.to_dict())
        study.set_user_attr("backend", c["backend"]["name"])
        study.set_user_attr("cuda_evolve", __version__)
        study.set_user_attr("config", OmegaConf.to_yaml(c))
    else:
        log.info("resuming run %s", name)
    return study


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _app(cfg: DictConfig) -> float | None:
    try:
        return run(cfg)
    except (EvolveError, OmegaConfBaseException) as exc:
        print(f"evolve: {exc}".splitlines()[0], file=sys.stderr)
        sys.exit(2)


def main() -> None:
    if sys.argv[1:2] == ["tasks"]:
        sys.exit(list_tasks(sys.argv[2:]))
    try:
        sys.argv[1:] = register_task_files(sys.argv[1:])
    except EvolveError as exc:
        print(f"evolve: {exc}".splitlines()[0], file=sys.stderr)
        sys.exit(2)
    _app()
