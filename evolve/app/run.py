"""One run, assembled out of its configuration: storage and study, the task and its backend, the
hardware and its ceilings, the proposer and the schedule, the search, verification and export.
``evolve.cli`` is the Hydra app around it (argv, one-line errors, sweeps)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing as mp
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig, OmegaConf
from optuna.artifacts import FileSystemArtifactStore

from evolve import __version__
from evolve.app.evaluators import nvidia_smi_gpus, start_evaluators, started_here, wait_for
from evolve.app.invocation import keep_invocation, resume_command, store_config
from evolve.app.sweep import in_sweep, record_job
from evolve.app.validation import validate, validate_settings
from evolve.errors import EvolveError
from evolve.evaluate.backend import Backend, create_backend
from evolve.evaluate.gpu.sanitize import sanitize
from evolve.evaluate.objective import Objective
from evolve.evaluate.recording import RecordingWriter, builtin_path
from evolve.evolution.llm.budget import LLMBudget
from evolve.evolution.llm.factory import create_llm
from evolve.evolution.llm.log import ExchangeLog
from evolve.evolution.llm.replay import ReplayLLM, run_seed
from evolve.evolution.process import ProposerProcess
from evolve.evolution.prompts import Prompts, record_includes, recorded_includes
from evolve.evolution.proposer import Proposer
from evolve.hardware import Hardware, named
from evolve.record import schema as record
from evolve.record.schema import Attr, StudyAttr
from evolve.record.storage import cached_ceilings, close_storage, open_storage, store_ceilings
from evolve.record.variants import VariantStore
from evolve.results.export import export
from evolve.results.verify import Verification, verify
from evolve.search.coordination import SharedStudy, SoleEvaluator
from evolve.search.ledger import Ledger
from evolve.search.loop import Search
from evolve.search.schedules import LocalLLM, RemoteLLM, Replay, Schedule, Tuning, proposer_done
from evolve.settings import EvolveConfig, Role
from evolve.task.files import command_line_name
from evolve.task.task import Task

log = logging.getLogger("evolve")


def run(cfg: DictConfig) -> float | None:
    """One run: returns the best time in ms (what a Hydra sweeper would minimize)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    plain: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[assignment]
    if cfg.backend.name == "check":  # no GPU, no study: check the task and say what is wrong
        from evolve.app.check import check_task

        validate_settings(plain)  # what a run would refuse (a sampler's typo), the check refuses too
        if check_task(plain):
            sys.exit(1)
        return None
    c: EvolveConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    task = validate(plain)  # before anything is created
    objective = Objective.from_config(plain["objective"])
    settings = c.search
    if settings.seed is None:  # one of its own, recorded: a replay of this run proposes alike
        settings = dataclasses.replace(settings, seed=run_seed(c.llm.name, c.llm.recording))
    if c.evaluator:  # evaluators must not propose alike
        settings = dataclasses.replace(settings, seed=settings.seed + c.evaluator)
    target = None if c.hardware.name == "auto" else named(plain["hardware"])
    role = c.role
    helpers = start_evaluators(c) if role == Role.all else []
    if helpers:  # the evaluators are the helper processes: this one proposes, waits and exports
        role = Role.propose
    _spawn_as_python_does()
    backend = None if role == Role.propose else create_backend(plain["backend"])
    stop = "interrupted"
    storage = None  # opened once the backend has started: a machine without a GPU creates nothing
    try:
        measured_on = None if backend is None else _start(backend, task, target, c)  # no GPU: no storage yet
        storage, artifacts = open_storage(c.storage)
        if backend is None:  # a proposer needs no GPU: it works with the evaluators' hardware
            hw = _stored_hardware(storage, c.run.name, helpers) or target
            if hw is None:
                raise EvolveError("role=propose needs hardware=<name> until an evaluator has created the run")
        else:
            hw = _with_ceilings(measured_on, backend, storage)
        study = _open_study(storage, artifacts, c.run.name, task, objective, hw, cfg)
        keep_invocation(cfg, Path(c.run.dir))
        variants = VariantStore(study, artifacts)
        variants.load()
        ledger = Ledger(study, variants, settings, c.evolution,
                        prefetch=backend.prefetch if backend is not None else None)
        ledger.add_seeds(task.seeds())
        run_dir = Path(c.run.dir)
        if role == Role.evaluate:  # for a proposer elsewhere, whose own NVRTC compiles nothing
            record_includes(study, hw.arch)
        includes = recorded_includes(study) if role == Role.propose else None
        proposer, replay = (None, None) if role == Role.evaluate else _proposer(ledger, c, task, hw, run_dir,
                                                                                 settings.seed, includes)
        if not task.seed_paths and proposer is None and role != Role.evaluate:
            raise EvolveError(f"task {task.name} has no seed kernels and no LLM to write the first one: add "
                              "seeds: [...] to the task, or choose llm=openai, llm=local or llm=mailbox")
        if helpers and proposer is None:  # our evaluators need not wait for children
            proposer_done(study, "no LLM")
        with contextlib.suppress(KeyboardInterrupt):
            if role == Role.propose and proposer is not None:
                stop = ProposerProcess(proposer, SharedStudy(study, ledger, settings), c.evolution).run()
            elif backend is not None:
                callbacks = []
                if c.backend.record:
                    callbacks.append(RecordingWriter(Path(c.backend.record), hw, task.name).add)
                coordination = (SharedStudy(study, ledger, settings) if role == Role.evaluate
                                else SoleEvaluator(study, ledger))
                schedule = _schedule(role, proposer, replay, c, study)
                stop = Search(study, variants, backend, task, objective, hw, settings, callbacks,
                              ledger=ledger, schedule=schedule, coordination=coordination).run()
            if helpers:
                stop = wait_for(helpers)
        checks = None
        if role == Role.all or helpers or (role == Role.evaluate and c.evolution.children_per_round):
            checks = _verify(c, backend, stop, task, hw, objective, variants, study)
        sanitized = None
        best = record.winner(study.get_trials(deepcopy=False), checks) if checks else None
        if best is not None and settings.sanitize:
            log.info("running compute-sanitizer (memcheck, racecheck) on the winner")
            sanitized = sanitize(task, hw, variants.get(best.user_attrs[Attr.VARIANT]),
                                 {k: int(v) for k, v in best.params.items()})
        summary = export(study, variants, task, hw, objective, run_dir, stop, checks, sanitized)
        record_job(study.study_name, str(run_dir), best_ms=summary.best_ms if summary else None,
                   kernel=summary.kernel if summary else "",
                   trials=sum(record.counts_toward_budget(t) for t in study.get_trials(deepcopy=False)))
    finally:
        if backend is not None:
            backend.close()
        for p in helpers:
            if p.poll() is None:
                p.terminate()
        if storage is not None:
            close_storage(storage)
    reports = not started_here()  # an evaluator another evolve started leaves the report to it
    if reports and summary is None:
        print(f"{task.name}: no correct candidate yet; see {run_dir}/report.md", file=sys.stderr)
    elif reports:
        print(f"{task.name}: {summary.line()}")
    if stop == "interrupted":
        print(f"interrupted: resume with  "
              f"{resume_command(study.study_name, str(run_dir), command_line_name(task.config))}",
              file=sys.stderr)
        sys.exit(130)
    return summary.best_ms if summary else None


def _schedule(role: Role, proposer: Proposer | None, replay: list[dict[str, Any]] | None, c: EvolveConfig,
              study: optuna.Study) -> Schedule:
    """Where the evaluator's LLM children come from."""
    if role == Role.evaluate:
        return RemoteLLM(study, c.evolution)
    if proposer is None:
        return Tuning()
    if replay is not None:
        return Replay(proposer, replay)
    return LocalLLM(proposer, c.evolution.overlap)


def _spawn_as_python_does() -> None:
    """Hydra's joblib launcher runs each job in a loky process, whose default start method
    ('loky') a spawned child cannot set up: the GPU worker and the compile helpers died at birth
    with a traceback. The job's own processes start the standard way."""
    if mp.get_start_method(allow_none=True) not in (None, "spawn", "fork", "forkserver"):
        mp.set_start_method("spawn", force=True)


def _start(backend: Backend, task: Task, target: Hardware | None, c: EvolveConfig) -> Hardware:
    """Start the backend; where the GPU worker cannot start because this machine has no NVIDIA
    GPU, say so, and name what runs without one (not: install CuPy, or a newer driver): the replay
    of recorded H200 measurements for a built-in task that has them, the check for any other."""
    try:
        return backend.start(task, target)
    except EvolveError as exc:
        if c.backend.name != "cupy" or nvidia_smi_gpus():
            raise
        name = command_line_name(task.config)
        replay = name == task.name and builtin_path("h200", task.name).is_file()
        if in_sweep():  # the same command with the backend added, not a single run's
            instead = ("replay recorded H200 measurements: add backend=replay hardware=h200 to the sweep"
                       if replay else "check the tasks: add backend=check to the sweep")
        elif replay:
            instead = f"replay recorded H200 measurements: evolve task={name} backend=replay hardware=h200"
        else:
            instead = f"check the task (reference, seeds, compiles): evolve task={name} backend=check"
        raise EvolveError(f"no NVIDIA GPU or driver found on this machine (nvidia-smi lists none). Without a "
                          f"GPU, {instead} (the GPU worker said: {exc})") from None


def _verify(c: EvolveConfig, backend: Backend | None, stop: str, task: Task, hw: Hardware,
            objective: Objective, variants: VariantStore, study: optuna.Study) -> list[Verification] | None:
    """Step 5, in a fresh worker, when the run measured on a GPU and was not interrupted."""
    if c.backend.name == "replay" or stop == "interrupted" or not c.search.verify:
        return None
    if backend is not None:
        backend.close()  # one GPU, one worker at a time
    fresh = create_backend({**dataclasses.asdict(c.backend), "device": 0})
    return verify(fresh, task, hw, objective, variants, record.ranked(study.get_trials(deepcopy=False)))


def _stored_hardware(storage: optuna.storages.BaseStorage, name: str,
                     helpers: list[subprocess.Popen[bytes]]) -> Hardware | None:
    """The hardware an evaluator recorded in the run's study; with helper processes of our own,
    wait for the first of them to create the run."""
    deadline = time.monotonic() + 600
    while True:
        try:
            spec = optuna.load_study(study_name=name, storage=storage).user_attrs.get(StudyAttr.HARDWARE_SPEC)
        except KeyError:
            spec = None
        if spec or not helpers or time.monotonic() > deadline or all(p.poll() is not None for p in helpers):
            return Hardware.from_dict(spec) if spec else None
        time.sleep(0.5)


def _proposer(ledger: Ledger, c: EvolveConfig, task: Task, hw: Hardware, run_dir: Path, seed: int | None,
              includes: tuple[str, ...] | None) -> tuple[Proposer | None, list[dict[str, Any]] | None]:
    """An LLM proposer, if the configuration (or the environment) names an LLM, and the recorded
    proposals it follows when the LLM is a replay."""
    llm, why_not = create_llm(c.llm)
    if llm is None:
        log.info("%s", why_not)
        return None, None
    caps = {"max_calls": c.llm.max_calls, "max_tokens": c.llm.max_tokens, "max_cost_usd": c.llm.max_cost_usd}
    replay = None
    if isinstance(llm, ReplayLLM):  # its schedule, and the recorded run's caps (it stops where it did)
        replay, caps = llm.proposals, llm.caps or caps
    budget = LLMBudget(ledger.study, caps["max_calls"], caps["max_tokens"], caps["max_cost_usd"])
    exchanges = ExchangeLog(run_dir / "llm.jsonl")
    exchanges.write("run", model=llm.model, seed=seed, **caps)
    evo = c.evolution
    proposer = Proposer(ledger, llm, budget, Prompts(task, hw, evo.prompts, includes), exchanges, evo,
                        seed=seed, threads=c.llm.concurrency or 1)
    log.info("LLM %s proposes children (%s)", llm.model, "replayed" if replay is not None else
             f"caps: {budget.max_calls} calls, {budget.max_tokens} tokens, ${budget.max_cost}")
    return proposer, replay


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


def _open_study(storage: optuna.storages.BaseStorage, artifacts: FileSystemArtifactStore, name: str,
                task: Task, objective: Objective, hw: Hardware, cfg: DictConfig) -> optuna.Study:
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
        study.set_user_attr(StudyAttr.HARDWARE_SPEC, hw.to_dict())
        study.set_user_attr("backend", cfg.backend.name)
        study.set_user_attr("cuda_evolve", __version__)
        store_config(study, artifacts, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    elif not started_here():  # an evaluator this process started joins the run it began
        log.info("resuming run %s", name)
    return study
