"""The settings of a run, their types and their defaults, each written once (Hydra structured configs).

``EvolveConfig`` is registered in Hydra's ConfigStore as ``evolve_schema``, the first entry of
``conf/config.yaml``'s defaults list: every option file of a typed group is merged into it, so a
key that does not exist (``search.n_trial=5``) or a value of the wrong type (``search.n_trials=abc``)
is an error before anything runs. The option files under ``conf/`` hold only what differs
between options. The task, hardware, objective and backend groups are typed too (their option
files and a task file of the user's are merged into these classes), so a typo there gets "did you
mean ...?" like everywhere else, never a ``+key`` hint for a key nothing reads. The backend's
settings are one class for every backend: a GPU command line (``backend.timing.rounds=3``) can be
tried first with ``backend=replay`` or ``backend=check``, which ignore what they do not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class Role(StrEnum):
    all = "all"  # propose and evaluate in this process
    propose = "propose"  # LLM proposals only, for evaluators elsewhere
    evaluate = "evaluate"  # GPU measurements only


@dataclass
class RunSettings:
    # The run's name is its study's name: run again with the same name to resume. In a sweep (-m),
    # every job gets its own run: the job number is appended to the name and directory (sweep.py).
    name: str = "${task.name}-${now:%Y%m%d-%H%M%S}"
    dir: str = "runs/${run.name}"


@dataclass
class SearchSettings:
    """The budget and the numeric search. Budgets are totals over resumes of the same run."""

    sampler: str = "tpe"  # tpe | random | cmaes | gp | qmc | bruteforce (per variant, own history)
    climb: bool = True  # per variant: neighbours of its best first (the sampler picks the step)
    n_trials: int = 100  # evaluated candidates, failed ones included
    timeout: float | None = None  # seconds of search, summed over resumes; None: no limit
    seed: int | None = None  # sampler seed, for reproducible proposals (evaluator i: seed + i)
    explore: float = 0.5  # optimism for variants with few trials when picking which to tune
    verify: bool = True  # re-measure the winner in a fresh worker on held-out sizes before export
    sanitize: bool = False  # also run the winner under compute-sanitizer (memcheck, racecheck)
    heartbeat_s: float = 10.0  # several evaluators: a measuring one marks its trial alive this often,
    stale_after_s: float = 60.0  # and a RUNNING trial silent this long (its evaluator died) is re-queued
    progress: bool = True  # progress bar (on a terminal; logs show each new best instead)


@dataclass
class EvolutionSettings:
    """How LLM children are made and kept."""

    islands: int = 2  # sub-populations, each with its own parents
    capacity: int = 8  # members per island
    elite: int = 1  # an island's best members are never displaced
    migrate_every: int = 20  # finished trials between copies of each island's best to the next
    novelty: float = 0.3  # weight of novelty (unlike the island's other members) in parent choice
    inspirations: int = 2  # other good kernels shown in a mutation prompt
    failures_shown: int = 3  # recent failed children shown, with their reasons
    operators: dict[str, float] = field(default_factory=lambda: {  # relative rates of the LLM operators
        "mutate": 0.5,  # rewrite the whole kernel
        "mutate_diff": 0.3,  # SEARCH/REPLACE edits of the parent
        "crossover": 0.2,  # combine two parents
    })  # (repair runs whenever a child fails)
    repair: bool = True  # a child that fails to compile, launch or compute goes back once
    tune_per_child: int = 6  # tuning trials each new variant earns while the LLM is proposing
    max_pending: int = 2  # LLM children without a result yet (asked, queued, measured) at most, and at
    # most llm.concurrency: later proposals wait for their outcome (a failed child's repair comes first)
    overlap: bool = True  # LLM calls run while the GPU measures
    children_per_round: int = 0  # rounds (docs/mailbox.md, two-machine rounds): role=propose makes
    # at most this many proposals and exits; role=evaluate measures what is queued and the tuning it
    # earned, then exits once nothing new comes within idle_wait_s. 0: no rounds
    idle_wait_s: float = 120.0  # role=evaluate: how long to wait for a proposer's children when idle
    proposer_heartbeat_s: float = 5.0  # role=propose: the proposer says it is alive this often ...
    proposer_stale_after_s: float = 60.0  # ... and evaluators count on it while it said so this recently
    prompts: dict[str, str] = field(default_factory=dict)  # replace a template: name -> path
    profile: bool = False  # parents' Nsight Compute profiles in prompts: the evaluator runs ncu on each
    # member's best (again when it gets 10% faster); needs ncu and the GPU's counters, a few seconds each


@dataclass
class LLMSettings:
    """Shared by every llm option; the option file sets name, model and endpoint."""

    name: str = MISSING  # auto | openai | local | mailbox | replay | none
    model: str | None = None
    base_url: str | None = None  # an OpenAI-compatible endpoint; None: the openai package's default
    recording: str | None = None  # llm=replay: a run's llm.jsonl
    mailbox: str | None = None  # llm=mailbox: the folder where requests and answers are exchanged
    poll_s: float = 1.0  # llm=mailbox: how often the run looks for answers (seconds)
    api_key_env: str = "OPENAI_API_KEY"  # the API key is read from this environment variable, never stored
    default_api_key: str | None = None
    token_param: str = "max_completion_tokens"
    temperature: float | None = None  # None: the model's default (required by some reasoning models)
    max_output_tokens: int | None = 16384
    timeout_s: float = 300.0
    max_retries: int = 5  # on 429, 5xx, timeouts, dropped connections and garbage, with backoff
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    concurrency: int = 2  # LLM calls in flight at once
    max_calls: int | None = 100  # caps, summed over resumes of the run
    max_tokens: int | None = 3_000_000
    max_cost_usd: float | None = 10.0
    # USD per million tokens; check your provider's current prices
    prices: dict[str, dict[str, float]] = field(default_factory=lambda: {
        "gpt-5": {"input": 1.25, "output": 10.0},
        "gpt-5-mini": {"input": 0.25, "output": 2.0},
        "gpt-5-nano": {"input": 0.05, "output": 0.4},
        "gpt-4.1": {"input": 2.0, "output": 8.0},
        "gpt-4.1-mini": {"input": 0.4, "output": 1.6},
        "gpt-4o": {"input": 2.5, "output": 10.0},
        "gpt-4o-mini": {"input": 0.15, "output": 0.6},
        "o4-mini": {"input": 1.1, "output": 4.4},
    })


@dataclass
class SizesSettings:
    correctness: list[dict[str, Any]] = field(default_factory=list)  # several, awkward ones included
    timing: list[dict[str, Any]] = field(default_factory=list)
    holdout: list[dict[str, Any]] | None = None  # the winner's re-check; None: correctness sizes + 1


@dataclass
class ToleranceSettings:
    atol: float = MISSING  # pass iff |out-ref| <= atol*max|ref| + rtol*|ref| everywhere ...
    rtol: float = MISSING
    l2: float = MISSING  # ... and the relative L2 error <= l2
    accumulates: Any = None  # a size expression: l2 bounds a one-term sum and grows as its square root


@dataclass
class TrafficSettings:
    bytes: Any = MISSING  # an expression over the sizes: bytes a call must move at least
    flops: Any = None  # None: 0
    peak: str | None = None  # memory | fp32 | ... (evolve.hardware.PEAKS); None: from flops


@dataclass
class TaskSettings:
    """A task (conf/task/*.yaml or a task file of the user's); evolve.task.task.load_task checks it."""

    name: str = MISSING
    description: str | None = None
    args: dict[str, Any] = field(default_factory=dict)  # name -> {role, dtype, shape, init, tolerance}
    sizes: SizesSettings = field(default_factory=SizesSettings)
    reference: str | None = None  # a built-in reference's name or module:function; None: the task's name
    tolerance: ToleranceSettings | None = None  # None: the output dtypes' defaults
    traffic: TrafficSettings = field(default_factory=TrafficSettings)
    defines: dict[str, Any] | None = None  # -D macros for every seed
    seeds: list[str] = field(default_factory=list)  # seed kernels, relative to the task file
    dir: str | None = None  # the task file's folder (set by evolve)
    stress: dict[str, Any] | None = None  # extra correctness rounds (evolve.task.stress)
    max_scratch_bytes: int | None = None  # the most scratch a spec may declare (None: 16 GiB)
    torch: dict[str, Any] | None = None  # a task made from a PyTorch problem file (evolve.task.torch_task)
    module: dict[str, Any] | None = None  # best.ModelNew's constructor, forward and parameters


@dataclass
class HardwareSettings:
    """A target (conf/hardware/*.yaml): datasheet figures; ``auto`` reads the GPU and sets none."""

    name: str = MISSING
    device_names: list[str] = field(default_factory=list)  # patterns of the device names it matches
    arch: str | None = None  # e.g. sm_90
    sms: int | None = None
    max_threads_per_block: int | None = None
    max_threads_per_sm: int | None = None
    max_shared_per_block: int | None = None  # bytes, with the opt-in attribute
    shared_per_sm: int | None = None
    registers_per_sm: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None  # global memory (datasheet; a worker reads the device's own)
    peak_dram_bps: float | None = None
    peak_fp32_flops: float | None = None
    peak_fp64_flops: float | None = None
    peak_tf32_tensor_flops: float | None = None
    peak_fp16_tensor_flops: float | None = None
    peak_bf16_tensor_flops: float | None = None
    peak_fp8_tensor_flops: float | None = None
    peak_int8_tensor_ops: float | None = None
    copy_bandwidth_bps: float | None = None  # measured at run time (or recorded)
    read_bandwidth_bps: float | None = None


@dataclass
class ObjectiveSettings:
    name: str = MISSING
    reduce: str = MISSING  # first (the first timing size) | geomean (over every timing size)


@dataclass
class TimingSettings:
    """How the GPU backend checks and times a candidate."""

    rounds: int = 2  # correctness rounds per size, fresh secret-seeded inputs each
    warmup_ms: float = 25.0  # warm-up: at least this long ...
    warmup_min: int = 10  # ... and at least this many launches
    min_samples: int = 10  # timed samples, each after an L2 flush
    max_samples: int = 100
    max_time_s: float = 2.0  # stop sampling after this long ...
    target_rel_iqr: float = 0.01  # ... or once IQR/median is this small

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> TimingSettings:
        """From a plain mapping (what the GPU worker is sent), a missing key at its default."""
        return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})


@dataclass
class BackendSettings:
    """Every backend's settings; each backend reads its own and ignores the others. These are
    the defaults: the option files conf/backend/*.yaml hold only what differs (cupy's device)."""

    name: str = MISSING  # cupy | replay | check
    device: int = 0  # cupy: CUDA device index of the GPU worker (cupy.yaml: the evaluator's index)
    compile_timeout_s: float = 60.0  # cupy: NVRTC time limit per candidate (a compile bomb is stopped)
    compile_ahead: Any = "auto"  # cupy: processes compiling the next candidates while the GPU measures
    # (auto: CPUs - 2, at most 8; 0: off)
    timeout_s: float = 120.0  # cupy: wall-clock limit per candidate after compiling (check + time)
    profile_timeout_s: float = 180.0  # cupy, evolution.profile: Nsight Compute's limit per candidate
    record: str | None = None  # cupy: append every measurement to this recording, for backend=replay
    timing: TimingSettings = field(default_factory=TimingSettings)  # cupy
    recordings: list[str] = field(default_factory=list)  # replay: extra recording files (JSON Lines)
    delay_s: float = 0.0  # replay: seconds per answer, to rehearse a GPU's pace (progress, interrupts)
    compile_all_up_to: int = 64  # check: a seed's space this small is compiled whole ...
    compile_sample: int = 16  # check: ... a larger one: its default and this many at random
    jobs: Any = "auto"  # check: compiles at once (auto: one per CPU)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> BackendSettings:
        """From a plain mapping (what a backend is given), a missing key at its default."""
        given = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        return cls(**{**given, "timing": TimingSettings.from_config(cfg.get("timing") or {})})


@dataclass
class StorageSettings:
    kind: str = MISSING  # rdb (SQLite, PostgreSQL) | journal
    url: str | None = None  # kind=rdb
    path: str | None = None  # kind=journal: the journal file
    artifacts: str = "runs/artifacts"  # kernel sources; shared by every process of a run


# settings that were renamed: the old name is refused with the new one (one name per concept:
# "worker" is the GPU process an evaluator measures in)
RENAMED = {"workers": "evaluators", "worker": "evaluator"}


@dataclass
class EvolveConfig:
    run: RunSettings = field(default_factory=RunSettings)
    role: Role = Role.all
    evaluators: str = "1"  # evaluator processes on this node: a number, or auto (one per visible GPU)
    evaluator: int = 0  # this evaluator's index (e.g. -m hydra/launcher=joblib evaluator=0,1,2,3)
    search: SearchSettings = field(default_factory=SearchSettings)
    evolution: EvolutionSettings = field(default_factory=EvolutionSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    task: TaskSettings = field(default_factory=TaskSettings)  # conf/task/*.yaml, checked by evolve.task.task
    hardware: HardwareSettings = field(default_factory=HardwareSettings)  # conf/hardware/*.yaml
    objective: ObjectiveSettings = field(default_factory=ObjectiveSettings)  # conf/objective/*.yaml
    backend: BackendSettings = field(default_factory=BackendSettings)  # conf/backend/*.yaml


ConfigStore.instance().store(name="evolve_schema", node=EvolveConfig)
