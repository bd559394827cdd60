"""One check of the whole configuration, before anything is created.

A mistake found once the run has started leaves an empty study in the dashboard (or a run that
silently does nothing, like ``search.n_trials=-5``). So the CLI checks every value a run will
use here first: types, ranges, choices, the packages a choice needs, the LLM's key, the task and
its seeds. Each problem is one line that names the key and what it accepts.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from evolve.errors import EvolveError, SpecError
from evolve.evaluate.objective import Objective
from evolve.evolution.llm.factory import create_llm
from evolve.evolution.prompts import NAMES as PROMPT_NAMES
from evolve.hardware import named
from evolve.kernel.spec import DEVICE_NAMES, Variant, iter_names
from evolve.search.samplers import make_sampler
from evolve.settings import EvolveConfig, LLMSettings, Role
from evolve.task.correctness import admit
from evolve.task.files import with_task_dir
from evolve.task.task import Task, load_task

BACKENDS = ("cupy", "replay", "check")
STORAGE_KINDS = ("rdb", "journal")
LLMS = ("auto", "openai", "local", "mailbox", "replay", "none")
ROLES = tuple(r.value for r in Role)
_SPEC_START = "/*@evolve"


def validate(c: Mapping[str, Any]) -> Task:
    """Check the resolved configuration; return its task, loaded and admitted, seeds parsed."""
    validate_settings(c)
    task = load_task(with_task_dir(c["task"]))
    admit(task)
    for path in task.seed_paths:
        _seed(path, task)
    return task


def validate_settings(c: Mapping[str, Any]) -> None:
    """Everything but the task (``backend=check`` judges that itself, one line per problem)."""
    for key, fields in _unknown(c, EvolveConfig):  # added with +key: Hydra lets it in, nothing reads it
        near = difflib.get_close_matches(key.rsplit(".", 1)[-1], fields)
        raise EvolveError(f"{key} is not a setting" + (f" (did you mean {' or '.join(near)}?)" if near else
                                                       f" (settings there: {', '.join(fields)})"))
    role = _choice(c, "role", ROLES)
    used = ["run", "task", "search", "objective", "hardware", "storage"]
    used += ["backend"] if role != "propose" else []
    used += ["llm", "evolution"] if role != "evaluate" else []
    for section in used:
        _required(c[section], section)
    evaluators = str(_get(c, "evaluators"))
    if evaluators != "auto" and not (evaluators.isdigit() and int(evaluators) >= 1):
        raise EvolveError(f"evaluators must be a number or auto (at least 1), got {evaluators!r}")
    _int(c, "evaluator", minimum=0)
    if not str(_get(c, "run.name") or "").strip():
        raise EvolveError("run.name must not be empty")
    _search(c)
    Objective.from_config(c["objective"])
    if c["hardware"].get("name") != "auto":
        named(c["hardware"])
    elif given := [k for k, v in c["hardware"].items() if v not in (None, [], "auto")]:
        raise EvolveError(f"hardware.{given[0]} is a named target's figure: hardware=auto reads the GPU "
                          f"(name a target, e.g. hardware=h200 hardware.{given[0]}=...)")
    _storage(c)
    if role != "propose":
        _backend(c)
    if role != "evaluate":
        _llm(c, role)
        _evolution(c)


def _unknown(c: Mapping[str, Any], schema: type, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
    """The keys of ``c`` its settings class does not have, with the ones it has; open maps
    (``llm.prices``, ``task.args``) hold any key."""
    hints = typing.get_type_hints(schema)
    fields = [f.name for f in dataclasses.fields(schema)]
    for key, value in c.items():
        if key not in hints:
            yield f"{prefix}{key}", fields
            continue
        inner = [t for t in typing.get_args(hints[key]) or (hints[key],) if dataclasses.is_dataclass(t)]
        if inner and isinstance(value, Mapping):
            yield from _unknown(value, inner[0], f"{prefix}{key}.")


def _search(c: Mapping[str, Any]) -> None:
    _int(c, "search.n_trials", minimum=0)
    if _get(c, "search.timeout") is not None:
        _number(c, "search.timeout", above=0, hint="seconds, or null for no limit")
    seed = _int(c, "search.seed", optional=True)
    make_sampler(str(_get(c, "search.sampler")), seed)  # a known name, and the packages it needs
    _number(c, "search.explore", minimum=0)
    for key in ("climb", "verify", "sanitize", "progress"):
        _bool(c, f"search.{key}")
    beat = _number(c, "search.heartbeat_s", above=0)
    stale = _number(c, "search.stale_after_s", above=0)
    if stale <= beat:
        raise EvolveError(f"search.stale_after_s ({stale:g}) must be longer than search.heartbeat_s "
                          f"({beat:g}), or live trials would be taken for dead ones")


def _storage(c: Mapping[str, Any]) -> None:
    kind = _choice(c, "storage.kind", STORAGE_KINDS, hint="choose storage=sqlite, postgres or journal")
    if kind == "rdb" and not _get(c, "storage.url"):
        raise EvolveError("storage.url is required, e.g. storage.url=postgresql://user@host/db "
                          "(or export EVOLVE_POSTGRES_URL)")


def _backend(c: Mapping[str, Any]) -> None:
    name = _choice(c, "backend.name", BACKENDS, hint="choose backend=cupy, replay or check")
    for key in _get(c, "backend.timing") or {}:  # checked on every backend: a GPU command line tried first
        if key in ("rounds", "warmup_min", "min_samples", "max_samples"):
            _int(c, f"backend.timing.{key}", minimum=1)
        else:
            _number(c, f"backend.timing.{key}", above=0)
    if name == "replay":
        if c["hardware"].get("name") == "auto":
            raise EvolveError("backend=replay needs a named hardware target such as hardware=h200 "
                              "(recorded measurements of that GPU)")
        if _get(c, "backend.delay_s") is not None:
            _number(c, "backend.delay_s", minimum=0)
        for p in _get(c, "backend.recordings") or []:
            if not Path(str(p)).is_file():
                raise EvolveError(f"backend.recordings: {p} is not a file")
        return
    _int(c, "backend.device", minimum=0)
    _number(c, "backend.timeout_s", above=0)
    _number(c, "backend.compile_timeout_s", above=0)
    if _get(c, "backend.compile_ahead") != "auto":
        _int(c, "backend.compile_ahead", minimum=0, hint="or auto")


def _llm(c: Mapping[str, Any], role: str) -> None:
    _choice(c, "llm.name", LLMS, hint="choose llm=auto, openai, local, mailbox, replay or none")
    for key in ("max_calls", "max_tokens"):
        _int(c, f"llm.{key}", minimum=0, optional=True)
    if _get(c, "llm.max_cost_usd") is not None:
        _number(c, "llm.max_cost_usd", minimum=0)
    _int(c, "llm.concurrency", minimum=1)
    _number(c, "llm.timeout_s", above=0)
    _int(c, "llm.max_retries", minimum=0)
    if _get(c, "llm.name") == "local":  # a server of the user's: nothing to default to
        for key, example in (("model", "llm.model=<name the server serves>"),
                             ("base_url", "llm.base_url=http://host:8000/v1")):
            if not _get(c, f"llm.{key}"):
                raise EvolveError(f"llm.{key} must be given for llm=local, e.g. {example}")
    llm, _ = create_llm(LLMSettings(**c["llm"]))  # the model, the key in the environment, the recording
    if llm is None and role == "propose":
        raise EvolveError(f"role=propose needs an LLM, and llm={c['llm']['name']} gives none: "
                          "choose llm=openai or llm=local")


def _evolution(c: Mapping[str, Any]) -> None:
    for key, low in (("islands", 1), ("capacity", 1), ("elite", 0), ("migrate_every", 1),
                     ("inspirations", 0), ("failures_shown", 0), ("tune_per_child", 0), ("max_pending", 1)):
        _int(c, f"evolution.{key}", minimum=low)
    _number(c, "evolution.novelty", minimum=0)
    _number(c, "evolution.idle_wait_s", minimum=0)
    for key in ("repair", "overlap"):
        _bool(c, f"evolution.{key}")
    rates = _get(c, "evolution.operators") or {}
    for op in rates:
        _number(c, f"evolution.operators.{op}", minimum=0)
    if rates and not sum(float(v) for v in rates.values()) > 0:
        raise EvolveError("evolution.operators: at least one rate must be above 0")
    for name, path in (_get(c, "evolution.prompts") or {}).items():
        if name not in PROMPT_NAMES:
            raise EvolveError(f"evolution.prompts.{name}: no such template (templates: "
                              f"{', '.join(PROMPT_NAMES)})")
        if not Path(str(path)).is_file():
            raise EvolveError(f"evolution.prompts.{name}: {path} is not a file")


def _seed(path: Path, task: Task) -> None:
    """A seed's launch spec parses (a YAML mistake is reported at its line and column in the file)
    and names only what the task and the spec define: a seed that could never launch is refused
    now, on every backend, rather than failing each of its trials."""
    source = path.read_text()
    try:
        spec = Variant.parse(source, name=path.stem).spec
    except SpecError as exc:
        raise EvolveError(f"seed {path}{_yaml_problem(exc, source) or f': {exc}'}") from None
    sizes, buffers = sorted(task.correctness_sizes[0]), [a.name for a in task.args]
    known = {*sizes, *buffers, *DEVICE_NAMES, *(t.name for t in spec.tunables),
             *(s.name for s in spec.scratch)}
    if unknown := sorted(set(iter_names(spec)) - known):
        raise EvolveError(f"seed {path}: its launch spec names {unknown}, which are not sizes "
                          f"({', '.join(sizes)}), task arguments ({', '.join(buffers)}), tunables, scratch "
                          f"or {', '.join(DEVICE_NAMES)}")


def _yaml_problem(exc: BaseException, source: str) -> str | None:
    """``:line:column: problem`` in the seed file, for the YAML error behind a spec error."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, yaml.MarkedYAMLError):
        cause = cause.__context__
    start = source.find(_SPEC_START)
    if not isinstance(cause, yaml.MarkedYAMLError) or cause.problem_mark is None or start < 0:
        return None
    start += len(_SPEC_START)
    first_line = source[:start].count("\n")
    first_column = start - source.rfind("\n", 0, start) - 1

    def at(mark: yaml.Mark) -> str:
        return f"{first_line + mark.line + 1}:{mark.column + 1 + (first_column if mark.line == 0 else 0)}"

    context = ""
    if cause.context and cause.context_mark:
        context = f" ({cause.context} at {at(cause.context_mark)})"
    return f":{at(cause.problem_mark)}: launch spec is not valid YAML: {cause.problem}{context}"


# ---- typed values -------------------------------------------------------------------------
def _required(node: Any, key: str) -> None:
    """Values an option leaves to the user (``???``, e.g. llm=local's model and base_url)."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            _required(v, f"{key}.{k}")
    elif node == "???":
        raise EvolveError(f"{key} must be given, e.g. {key}=...")


def _get(c: Mapping[str, Any], key: str) -> Any:
    node: Any = c
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _fail(key: str, value: Any, what: str, hint: str) -> EvolveError:
    return EvolveError(f"{key} must be {what}{f' ({hint})' if hint else ''}, got {value!r}")


def _int(c: Mapping[str, Any], key: str, minimum: int | None = None, optional: bool = False,
         hint: str = "") -> int | None:
    v = _get(c, key)
    if v is None and optional:
        return None
    what = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    if isinstance(v, bool) or not isinstance(v, int) or (minimum is not None and v < minimum):
        raise _fail(key, v, what, hint)
    return v


def _number(c: Mapping[str, Any], key: str, minimum: float | None = None, above: float | None = None,
            hint: str = "") -> float:
    v = _get(c, key)
    what = "a number" + (f" >= {minimum:g}" if minimum is not None else "") + (
        f" > {above:g}" if above is not None else "")
    if (isinstance(v, bool) or not isinstance(v, int | float) or (minimum is not None and v < minimum)
            or (above is not None and v <= above)):
        raise _fail(key, v, what, hint)
    return float(v)


def _bool(c: Mapping[str, Any], key: str) -> None:
    v = _get(c, key)
    if v is not None and not isinstance(v, bool):
        raise _fail(key, v, "true or false", "")


def _choice(c: Mapping[str, Any], key: str, choices: tuple[str, ...], hint: str = "") -> str:
    v = _get(c, key)
    if v not in choices:
        raise _fail(key, v, f"one of {', '.join(choices)}", hint)
    return str(v)
