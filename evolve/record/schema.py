"""The study's schema: what a run records about each candidate, and how the record is read back.

Every candidate is one trial. It is queued as a WAITING trial that carries its origin (variant,
operator, parents), measured by whichever evaluator pops it, and finished with its status and
figures as user attributes; its source goes to the artifact store. Readers (export, lineage,
verification, the population) use the keys and queries below, so the schema is written once.

This is also the only module that touches Optuna's private API (the storage behind a study, a
trial's storage id, the ``fixed_params`` system attribute, the artifact store protocol): what
enqueueing, heartbeats and re-queueing need and the public API does not offer.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.artifacts import upload_artifact
from optuna.artifacts._protocol import ArtifactStore
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, Trial, TrialState, create_trial

from evolve.evaluate.measurement import NOT_COUNTED, Measurement, Status, inaccurate
from evolve.evaluate.metrics import roofline
from evolve.hardware import Hardware
from evolve.kernel.spec import Variant, candidate_key
from evolve.task.task import Task


class Attr:
    """Trial user attributes."""

    # where the candidate came from: set when it is queued, kept when it is queued again
    VARIANT = "variant"  # the variant's id (hash of its normalized source)
    VARIANT_NAME = "variant_name"
    OPERATOR = "operator"  # see Op
    PARENTS = "parents"  # variant ids
    LLM_MODEL = "llm_model"  # an LLM child's first trial: the model that wrote it ...
    LLM_TOKENS = "llm_tokens"  # ... and the tokens it took
    # what measuring it gave
    EVALUATOR = "worker"  # host:pid of the evaluator (the stored key predates the name)
    STATUS = "status"  # a measurement.Status value
    REASON = "reason"
    DIAGNOSTICS = "diagnostics"  # sanitized compiler output
    EVAL_S = "eval_s"  # the evaluator's time for the candidate: compile ...
    COMPILE_S = "compile_s"
    CHECK_S = "check_s"  # ... and correctness (the rest is timing)
    IQR_MS = "iqr_ms"  # of the timed samples at the first timing size
    SAMPLES = "samples"
    GBPS = "gbps"  # the roofline figures (metrics.roofline), correct candidates only
    TFLOPS = "tflops"
    BANDWIDTH_FRACTION = "bandwidth_fraction"
    ROOFLINE_FRACTION = "roofline_fraction"
    REGISTERS = "registers"  # resources: the worst kernel of the launch
    LOCAL_BYTES = "local_bytes"
    OCCUPANCY = "occupancy"


ORIGIN = (Attr.VARIANT, Attr.VARIANT_NAME, Attr.OPERATOR, Attr.PARENTS)


class StudyAttr:
    """Study user attributes this package reads back (the identity of a run is the CLI's)."""

    ELAPSED_S = "elapsed_s"  # search time, summed over resumes
    PROPOSER = "proposer"  # a proposer process's state and heartbeat (see search/schedules.py)
    PROPOSALS = "llm_proposals"  # LLM proposals planned so far, over resumes: the next one's number
    HARDWARE_SPEC = "hardware_spec"  # the Hardware the evaluators measure on
    INCLUDES = "includes"  # the allowed headers the evaluators' NVRTC compiles (for proposers elsewhere)
    VARIANT_PREFIX = "variant:"  # + variant id: the variant's metadata (see variants.py)
    PROFILE_PREFIX = "profile:"  # + variant id: its Nsight Compute profile (see profile.py)


class Op:
    """How a candidate was made (``Attr.OPERATOR``)."""

    SEED = "seed"
    TUNE = "tune"
    MUTATE = "mutate"
    MUTATE_DIFF = "mutate_diff"
    CROSSOVER = "crossover"
    REPAIR = "repair"
    WRITE = "write"  # the first kernel of a task without seeds


LLM_OPERATORS = (Op.MUTATE, Op.MUTATE_DIFF, Op.CROSSOVER, Op.REPAIR, Op.WRITE)
REPAIRABLE = (Status.COMPILE_ERROR.value, Status.LAUNCH_ERROR.value, Status.WRONG.value,
              Status.REJECTED.value)  # what an LLM repair may fix

# trial system attributes
_FIXED = "fixed_params"  # Optuna's: the params a queued trial will be given
_HEARTBEAT = "evolve:heartbeat"  # when the trial's evaluator last said it was alive
_DEATHS = "evolve:deaths"  # evaluators that died while measuring this candidate
MAX_DEATHS = 2  # then the candidate is finished as crashed instead of queued again


# ---- reading ------------------------------------------------------------------------------------
def counts_toward_budget(t: FrozenTrial) -> bool:
    """Finished trials count; one cut short by an interrupt is retried instead, and one another
    process queued beyond the budget (or twice) was never measured."""
    finished = t.state in (TrialState.COMPLETE, TrialState.FAIL)
    return finished and t.user_attrs.get(Attr.STATUS) not in NOT_COUNTED


class Verdicts:
    """Per variant name: trials passed and trials judged wrong on their values. A variant with both
    flipped: a verdict that flips on fresh inputs is the tolerance's fault more often than the kernel's."""

    def __init__(self) -> None:
        self.counts: dict[str, tuple[int, int]] = {}

    def add(self, name: str, status: str | None, reason: str | None) -> bool:
        """Count one verdict; True when it makes the variant flip (once per variant)."""
        ok, wrong = was = self.counts.get(name, (0, 0))
        self.counts[name] = (ok + (status == Status.OK), wrong + inaccurate(status, reason))
        return all(self.counts[name]) and not all(was)


def flipped(trials: Iterable[FrozenTrial]) -> dict[str, tuple[int, int]]:
    """Variant name -> (passed, judged wrong on values), for the variants whose verdicts flipped."""
    v = Verdicts()
    for t in trials:
        v.add(str(t.user_attrs.get(Attr.VARIANT_NAME, "?")), t.user_attrs.get(Attr.STATUS),
              t.user_attrs.get(Attr.REASON))
    return {name: n for name, n in v.counts.items() if all(n)}


def flip_note(name: str, passed: int, wrong: int) -> str:
    """What a flipping verdict means, for the run's log and report."""
    return (f"{name} passed {passed} of {passed + wrong} trials and was judged wrong on its values in "
            f"{wrong}: unless its tunables change what it computes, the tolerance may be tighter than "
            "the task's arithmetic allows (evolve backend=check warns where the reference in float32 "
            "fails it)")


def fixed_params(t: FrozenTrial) -> dict[str, Any]:
    """The candidate's tunables, also while it is queued (params are set only once measured)."""
    return dict(t.system_attrs.get(_FIXED) or t.params)


def candidate_of(t: FrozenTrial) -> tuple[str, tuple[tuple[str, int], ...]]:
    return candidate_key(t.user_attrs.get(Attr.VARIANT, ""), fixed_params(t))


def correct(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]


def fastest_per_variant(trials: Iterable[FrozenTrial]) -> dict[str, FrozenTrial]:
    """Each variant's fastest correct trial (of equal times, the first in the given order)."""
    best: dict[str, FrozenTrial] = {}
    for t in correct(trials):
        vid = t.user_attrs.get(Attr.VARIANT)
        if vid is not None and (vid not in best or t.value < best[vid].value):  # type: ignore[operator]
            best[vid] = t
    return best


def ranked(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """Correct trials, fastest first, one per candidate: the order winners are re-checked in."""
    seen, out = set(), []
    for t in sorted(correct(trials), key=lambda t: t.value):  # type: ignore[arg-type, return-value]
        key = candidate_of(t)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


class Check(Protocol):
    """A re-measurement of a trial (verify.Verification)."""

    trial: int

    @property
    def passed(self) -> bool: ...


def winner(trials: Sequence[FrozenTrial], checks: Sequence[Check] | None = None) -> FrozenTrial | None:
    """The run's best: with re-measurements (best first), the first candidate that passed, or
    none if none did; without (the replay backend cannot re-measure), the fastest correct trial."""
    if checks:
        passed = next((c for c in checks if c.passed), None)
        return None if passed is None else next((t for t in trials if t.number == passed.trial), None)
    best = ranked(trials)
    return best[0] if best else None


# ---- writing --------------------------------------------------------------------------------------
def write_measurement(trial: Trial, variant: Variant, tunables: Mapping[str, int], m: Measurement,
                      task: Task, hw: Hardware, artifacts: ArtifactStore) -> None:
    """Everything a measurement says about the candidate; its source (tunables baked in) and
    compiler log as artifacts of the trial."""
    trial.set_user_attr(Attr.STATUS, m.status.value)
    if m.reason:
        trial.set_user_attr(Attr.REASON, m.reason[:2000])
    if m.log:
        trial.set_user_attr(Attr.DIAGNOSTICS, m.log[:4000])
    trial.set_user_attr(Attr.EVAL_S, round(m.time_s, 3))
    trial.set_user_attr(Attr.COMPILE_S, round(m.compile_s, 3))
    trial.set_user_attr(Attr.CHECK_S, round(m.check_s, 3))
    if m.ok:
        for k, v in roofline(m, task, hw).items():
            trial.set_user_attr(k, round(v, 6))
        timing = next(iter(m.timings.values()))
        trial.set_user_attr(Attr.IQR_MS, round(timing.iqr_s * 1e3, 6))
        trial.set_user_attr(Attr.SAMPLES, timing.n)
    if m.resources:
        trial.set_user_attr(Attr.REGISTERS, max(r["registers"] for r in m.resources.values()))
        trial.set_user_attr(Attr.LOCAL_BYTES, max(r["local_bytes"] for r in m.resources.values()))
        trial.set_user_attr(Attr.OCCUPANCY, round(min(r["occupancy"] for r in m.resources.values()), 3))
    with tempfile.TemporaryDirectory() as tmp:
        files = {f"{variant.name}.cu": variant.with_defines(tunables)}
        if m.log:
            files["compile.log"] = m.log
        for name, text in files.items():
            path = Path(tmp) / name
            path.write_text(text)
            upload_artifact(artifact_store=artifacts, file_path=str(path), study_or_trial=trial,
                            mimetype="text/plain", encoding="utf-8")


def skip(study: optuna.Study, trial: Trial, status: Status, reason: str = "") -> None:
    """Finish a trial that measured nothing (no candidate, not ours to measure, ...)."""
    trial.set_user_attr(Attr.STATUS, status.value)
    if reason:
        trial.set_user_attr(Attr.REASON, reason)
    study.tell(trial, state=TrialState.FAIL)


# ---- the storage underneath: ids, heartbeats, re-queueing ----------------------------------------
def trial_id(t: Trial | FrozenTrial) -> int:
    """The storage's id: creation order across processes (trial numbers can tie or swap when
    processes create trials at the same moment)."""
    return t._trial_id


def stored(study: optuna.Study, tid: int) -> FrozenTrial:
    return study._storage.get_trial(tid)


def mark_alive(study: optuna.Study, tid: int) -> None:
    """A system attribute rather than Optuna's heartbeat, which only RDB storages have."""
    study._storage.set_trial_system_attr(tid, _HEARTBEAT, time.time())


def heartbeat(t: FrozenTrial) -> float | None:
    """The last mark of the trial's evaluator (its own clock's time; None if it never marked it)."""
    value = t.system_attrs.get(_HEARTBEAT)
    return None if value is None else float(value)


def deaths(t: FrozenTrial) -> int:
    """Evaluators that died while the trial's candidate was being measured (see ``requeue``)."""
    return int(t.system_attrs.get(_DEATHS, 0))


def requeue(study: optuna.Study, tid: int, died: bool = False) -> Status | None:
    """End a RUNNING trial and queue its candidate again; the status it was ended with, or None
    if another process ended it first (then that process re-queues it).

    An interrupt (Ctrl-C) ends it as ``interrupted`` (not counted). A dead evaluator (``died``:
    a run killed mid-measurement, an evaluator that stopped beating) may have been killed by the
    candidate itself, so deaths are counted per candidate: at ``MAX_DEATHS`` the trial ends as
    ``crashed`` (counted, a failure) instead, and a resume is not stopped by it again."""
    storage = study._storage
    trial = storage.get_trial(tid)
    n = deaths(trial) + died
    crashed = died and n >= MAX_DEATHS
    status = Status.CRASHED if crashed else Status.INTERRUPTED
    try:
        storage.set_trial_user_attr(tid, Attr.STATUS, status.value)
        if crashed:
            storage.set_trial_user_attr(tid, Attr.REASON,
                                        f"the evaluator died {n} times while measuring it; not retried")
        if not storage.set_trial_state_values(tid, state=TrialState.FAIL):
            return None
    except UpdateFinishedTrialError:
        return None
    if not crashed:
        origin = {k: trial.user_attrs[k] for k in ORIGIN if k in trial.user_attrs}
        enqueue(study, fixed_params(trial), origin, died=n)
    return status


def enqueue(study: optuna.Study, params: Mapping[str, Any], attrs: Mapping[str, Any],
            died: int = 0) -> None:
    """Queue a candidate as a WAITING trial (``Study.enqueue_trial``), with the number of
    evaluators that died measuring it so far."""
    if not died:
        study.enqueue_trial(dict(params), user_attrs=dict(attrs))
        return
    study.add_trial(create_trial(state=TrialState.WAITING, user_attrs=dict(attrs),
                                 system_attrs={_FIXED: dict(params), _DEATHS: died}))
