"""``evolve-bench sections=[kernelbench]``: KernelBench-format problem files (a checkout with its
level folders, one level folder, or files), each evolved from no seed by ``evolve task=<file>
run.name=kb-<level>-<stem>`` under the section's budget, then measured in a process of its own
(``kernelbench_measure``). Resumable per problem: a finished problem's result file is kept and
skipped next time; an unfinished one is run again under the same name, which resumes its run.
A problem whose ``evolve`` stopped on an error, or whose measurement could not start (no CUDA, a
problem file that does not load), is reported with that error and tried again next time (a refused
task costs seconds; a misconfigured machine is not recorded as fifty failures). A measurement that
died or ran out of time is a verdict: a kernel can kill its process."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.bench.timer import TimerSettings
from evolve.errors import EvolveError

log = logging.getLogger(__name__)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# a problem path reaches evolve as a Hydra override: nothing its grammar or a sweep would read
SAFE_PATH = re.compile(r"[\w./@+-]+")
INTERRUPTED = 130  # evolve's exit status when stopped by Ctrl-C (it says how to resume)
REASON_CHARS = 300


@dataclass(frozen=True)
class Settings:
    """The section's settings (bench.yaml, ``kernelbench:``), checked before anything runs."""

    problems: list[str]
    levels: list[str]
    dir: str
    llm: str
    n_trials: int
    llm_calls: int
    overrides: list[str]
    storage: str | None
    seeds: int
    input_sets: int
    compile_modes: list[str]
    kb_timing: dict[str, int]
    timer: dict[str, Any]
    measure_timeout_s: float
    evolve: bool  # False: measure each problem's run as it is (evolved elsewhere, e.g. in rounds)

    @classmethod
    def from_config(cls, c: Mapping[str, Any]) -> Settings:
        fields = cls.__dataclass_fields__
        if unknown := sorted(set(c) - set(fields)):
            raise EvolveError(f"kernelbench: unknown setting(s) {unknown}; settings: {sorted(fields)}")
        if missing := sorted(set(fields) - set(c)):
            raise EvolveError(f"kernelbench: missing setting(s) {missing}")
        s = cls(**{k: c[k] for k in fields})
        if not s.problems:
            raise EvolveError("sections=[kernelbench] needs kernelbench.problems: a KernelBench checkout, a "
                              "level folder or problem files ('kernelbench.problems=[path/to/KernelBench]')")
        for k in ("n_trials", "llm_calls", "seeds", "input_sets"):
            if not isinstance(getattr(s, k), int) or getattr(s, k) < 1:
                raise EvolveError(f"kernelbench.{k} must be a positive integer, not {getattr(s, k)!r}")
        if s.input_sets > s.seeds:
            raise EvolveError(f"kernelbench.input_sets ({s.input_sets}) cannot exceed kernelbench.seeds "
                              f"({s.seeds}): the timed input sets are the checked ones")
        try:
            TimerSettings(**s.timer)
        except TypeError as exc:
            raise EvolveError(f"kernelbench.timer: {exc}") from None
        if bad := [m for m in s.compile_modes if m not in COMPILE_MODES]:
            raise EvolveError(f"kernelbench.compile_modes: unknown {bad}; torch.compile's modes: "
                              f"{list(COMPILE_MODES)}")
        if s.llm == "none":
            raise EvolveError("kernelbench.llm=none cannot work: a problem has no seed kernel, an LLM writes "
                              "the first one (choose auto, openai, local or mailbox)")
        if set(s.kb_timing) != {"warmup", "trials"} or any(int(v) < 0 for v in s.kb_timing.values()):
            raise EvolveError(f"kernelbench.kb_timing needs warmup and trials (>= 0), not {s.kb_timing}")
        return s

    @property
    def home(self) -> Path:
        return Path(self.dir).resolve()


@dataclass(frozen=True)
class Problem:
    path: Path
    level: str

    @property
    def name(self) -> str:
        """The evolve run's name, and so its study's: the same problem resumes the same run."""
        return f"kb-{self.level}-{self.path.stem}"


def find_problems(entries: list[str], levels: list[str]) -> list[Problem]:
    """The problem files named: a file; a folder holding level folders (a KernelBench checkout,
    its root or its ``KernelBench/`` folder), of which the configured levels are taken; or a
    folder of problem files, a level of its own name. In KernelBench's order (by number)."""
    found: list[Problem] = []
    for entry in entries:
        path = Path(entry).expanduser()
        if not path.exists():
            raise EvolveError(f"kernelbench.problems: {entry} does not exist")
        if path.is_file():
            if path.suffix != ".py":
                raise EvolveError(f"kernelbench.problems: {entry} is not a Python problem file")
            found.append(Problem(path.resolve(), path.resolve().parent.name))
            continue
        root = path / "KernelBench" if (path / "KernelBench").is_dir() else path
        folders = [root / lv for lv in levels if (root / lv).is_dir()] or [path]
        files = [Problem(f.resolve(), f.resolve().parent.name) for d in folders for f in _files(d)]
        if not files:
            raise EvolveError(f"kernelbench.problems: no problem files (*.py) in {entry}"
                              + (f" or its level folders {levels}" if folders == [path] else ""))
        found += files
    names = Counter(p.name for p in found)
    if dup := sorted(n for n, k in names.items() if k > 1):
        raise EvolveError(f"kernelbench.problems: two problem files would share the run name {dup[0]}")
    for p in found:
        if not SAFE_PATH.fullmatch(str(p.path)):
            raise EvolveError(f"kernelbench.problems: {p.path}: only letters, digits and _ . / @ + - are "
                              "passed to evolve safely; rename the file or link it from such a path")
    return found


def _files(folder: Path) -> list[Path]:
    def key(p: Path) -> tuple[int, str]:
        head = p.stem.split("_", 1)[0]
        return (int(head) if head.isdigit() else sys.maxsize, p.name)

    return sorted((p for p in folder.glob("*.py") if not p.name.startswith("_")), key=key)


@dataclass
class Outcome:
    """How an ``evolve`` run ended: its exit status and, when it failed, its own one-line reason."""

    rc: int
    reason: str | None = None
    wall_s: float = 0.0


Runner = Callable[[Problem, Settings], Outcome]
Measurer = Callable[[Problem, Settings], dict[str, Any]]


def storage_url(s: Settings) -> str:
    return s.storage or f"sqlite:///{s.home}/evolve.db"


def run_dir(p: Problem, s: Settings) -> Path:
    return s.home / p.name


def evolve_command(p: Problem, s: Settings) -> list[str]:
    return [sys.executable, "-m", "evolve", f"task={p.path}", f"run.name={p.name}",
            f"run.dir={run_dir(p, s)}", f"llm={s.llm}", f"search.n_trials={s.n_trials}",
            f"llm.max_calls={s.llm_calls}", "search.progress=false", f"storage.url={storage_url(s)}",
            f"storage.artifacts={s.home}/artifacts",
            *s.overrides]


def run_evolve(p: Problem, s: Settings) -> Outcome:
    """``evolve`` as a subprocess, as a user runs it; its output in ``<dir>/logs/<name>.log``."""
    logs = s.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(logs / f"{p.name}.log", "a") as f:
        rc = subprocess.run(evolve_command(p, s), stdout=f, stderr=subprocess.STDOUT,
                            env=os.environ.copy()).returncode
    return Outcome(rc, None if rc == 0 else last_error(logs / f"{p.name}.log"), time.perf_counter() - t0)


def last_error(log_file: Path) -> str:
    """The run's own reason: its last ``evolve: ...`` line (its one-line errors), else its last line."""
    try:
        lines = [x.strip() for x in log_file.read_text(errors="replace").splitlines()[-200:] if x.strip()]
    except OSError:
        return "no log"
    said = [x for x in lines if x.startswith("evolve: ")]
    return clip(said[-1] if said else lines[-1] if lines else "no output")


def clip(text: str, n: int = REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def search_reason(p: Problem, s: Settings) -> str:
    """Why a finished run exported nothing, from its record: its failures by kind and the last one."""
    import optuna

    from evolve.record.schema import Attr

    try:
        study = optuna.load_study(study_name=p.name, storage=storage_url(s))
    except KeyError:
        return "evolve made no study"
    failed = sorted((t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(Attr.STATUS) not in
                     (None, "ok")), key=lambda t: t.number)
    if not failed:
        return "no correct candidate: nothing was measured"
    kinds = Counter(str(t.user_attrs[Attr.STATUS]) for t in failed)
    last = failed[-1].user_attrs
    return clip(f"no correct candidate ({', '.join(f'{k} {n}' for k, n in kinds.most_common())}); "
                f"last: {last[Attr.STATUS]}: {last.get(Attr.REASON) or ''}")


def measure_in_process(p: Problem, s: Settings) -> dict[str, Any]:
    """``kernelbench_measure`` in a fresh process (a kernel that kills it fails this problem only)."""
    home = s.home / "measure"
    home.mkdir(parents=True, exist_ok=True)
    request, result = home / f"{p.name}.request.json", home / f"{p.name}.json"
    result.unlink(missing_ok=True)
    request.write_text(json.dumps({
        "problem": str(p.path), "run_dir": str(run_dir(p, s)), "seeds": s.seeds, "input_sets": s.input_sets,
        "compile_modes": s.compile_modes, "timer": s.timer, "kb_timing": s.kb_timing}, indent=2))
    cmd = [sys.executable, "-m", "evolve.bench.kernelbench_measure", str(request), str(result)]
    with open(home / f"{p.name}.log", "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                timeout=s.measure_timeout_s).returncode
        except subprocess.TimeoutExpired:
            return {"error": f"the measurement took more than {s.measure_timeout_s:g} s"}
    if not result.is_file():
        return {"error": f"the measurement process died (exit {rc}): {last_error(home / f'{p.name}.log')}"}
    return json.loads(result.read_text())


def verdict(p: Problem, s: Settings, outcome: Outcome, measured: dict[str, Any] | None) -> dict[str, Any]:
    """A problem's record: correct or not, and why not, in the stage where it failed."""
    rec: dict[str, Any] = {"problem": str(p.path), "level": p.level, "name": p.name,
                           "run_dir": str(run_dir(p, s)),
                           "evolve": {"rc": outcome.rc, "wall_s": outcome.wall_s}, "correct": False,
                           "stage": "ok", "reason": None, "impls": {}}
    if outcome.rc != 0:
        return rec | {"stage": "evolve", "reason": outcome.reason}
    if measured is None:
        return rec | {"stage": "search", "reason": outcome.reason}
    if "error" in measured:
        return rec | {"stage": "measure", "reason": clip(str(measured["error"]))}
    rec |= {k: v for k, v in measured.items() if k != "impls"} | {"impls": measured["impls"]}
    new = measured["impls"]["ModelNew"]
    if not new["correct"]:
        return rec | {"stage": "check", "reason": clip(str(new["reason"]))}
    bad = {k: new[k]["bad_calls"] for k in ("ours", "kernelbench") if new.get(k, {}).get("bad_calls")}
    if bad:
        first = new.get("kernelbench", {}).get("first_bad")
        return rec | {"stage": "timed", "reason": clip(
            "wrong in timed calls: " + ", ".join(f"{n} of the {k} protocol's" for k, n in bad.items())
            + (f" ({first})" if first else ""))}
    return rec | {"correct": True}


def as_evolved(p: Problem, s: Settings) -> Outcome:
    """``kernelbench.evolve=false``: the problem's run as it stands (its rounds proposed and
    evaluated elsewhere); one that exported nothing is reported from its record."""
    return Outcome(0)


def run_problems(problems: list[Problem], s: Settings, runner: Runner | None = None,
                 measurer: Measurer = measure_in_process) -> Iterator[dict[str, Any]]:
    """Each problem's record, in order: a finished one read back, the others run (resumed) now."""
    runner = runner or (run_evolve if s.evolve else as_evolved)
    results = s.home / "results"
    results.mkdir(parents=True, exist_ok=True)
    for i, p in enumerate(problems, 1):
        done = results / f"{p.name}.json"
        if done.is_file():
            log.info("kernelbench %d/%d %s: finished earlier, kept", i, len(problems), p.name)
            yield json.loads(done.read_text())
            continue
        if s.evolve:
            log.info("kernelbench %d/%d %s: evolve (%d trials, %d LLM calls)", i, len(problems), p.name,
                     s.n_trials, s.llm_calls)
        outcome = runner(p, s)
        if outcome.rc == INTERRUPTED:
            raise EvolveError(f"evolve on {p.name} was interrupted; run the bench again to resume it")
        measured = None
        if outcome.rc == 0:
            if (run_dir(p, s) / "best.json").is_file():
                log.info("kernelbench %s: measuring ModelNew beside eager and torch.compile", p.name)
                measured = measurer(p, s)
            else:
                outcome.reason = search_reason(p, s)
        rec = verdict(p, s, outcome, measured)
        if outcome.rc == 0 and not (measured or {}).get("retry"):  # a verdict, kept
            done.write_text(json.dumps(rec, indent=2, default=str) + "\n")
        yield rec
