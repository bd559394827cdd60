"""Where tasks come from: the built-in ones, a task file named by its path, Hydra's search path.

``evolve task=path/to/op.yaml`` names a task file anywhere. Before Hydra composes the
configuration, each such path becomes an option of the ``task`` group (``file:/abs/path.yaml``,
held in Hydra's ConfigStore, which its launchers carry to their jobs) whose configuration records
the file's folder as ``dir``: seeds and a ``module:function`` reference are found there, by the
search process and by every process that rebuilds the task from its configuration. A folder given
with ``--config-dir DIR`` (tasks in ``DIR/task/NAME.yaml``) works as Hydra documents it; the
folder is found from Hydra's search path. ``evolve tasks`` lists what there is.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evolve.errors import EvolveError
from evolve.paths import CONF_DIR

FILE_PREFIX = "file:"
SUFFIXES = (".yaml", ".yml")
BUILTIN_DIR = CONF_DIR / "task"
DEPTH = ("*.y*ml", "*/*.y*ml", "*/*/*.y*ml")  # a folder, its subfolders and theirs (tasks/op/op.yaml)
MOST_FILES = 1000  # YAML files looked at in one search


def register_task_files(argv: Sequence[str]) -> list[str]:
    """The command line with every ``task=`` value that is a YAML path (a multirun's
    comma-separated list too) made a registered ``file:/abs/path.yaml`` option. A name that is
    neither a built-in task nor a file is refused with the tasks there are (unless a config
    folder of the user's may hold it)."""
    searched = any(a.startswith(("--config-dir", "-cd", "hydra.searchpath", "--config-path", "-cp"))
                   for a in argv)
    folders = _config_dirs(argv)
    out = []
    for arg in argv:
        if arg.startswith("task="):
            values = [_in_config_dir(v, folders) for v in arg[len("task="):].split(",")]
            for v in values if not searched and "(" not in arg else ():  # not a sweep function
                if not (_is_file(v) or (BUILTIN_DIR / f"{v}.yaml").is_file()):
                    raise EvolveError(f"unknown task {v!r}{_near_name(v)}: {_known()}")
            if any(_is_file(v) for v in values):
                arg = "task=" + ",".join(_register(v) if _is_file(v) else v for v in values)
        out.append(arg)
    return out


def _config_dirs(argv: Sequence[str]) -> list[Path]:
    """The folders given with ``--config-dir DIR`` / ``-cd DIR`` (or ``--config-dir=DIR``)."""
    out = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in ("--config-dir", "-cd"):
            if not eq and i + 1 < len(argv):
                value = argv[i + 1]
            if value:
                out.append(Path(value).expanduser())
    return out


def _in_config_dir(value: str, folders: Sequence[Path]) -> str:
    """A task name the user's config folder holds becomes that file's path: Hydra would otherwise
    compose the built-in of the same name (its own config folder comes first in the search path),
    and the user's task would be silently replaced."""
    if _is_file(value) or "(" in value:
        return value
    for folder in folders:
        for suffix in (".yaml", ".yml"):
            if (path := folder / "task" / f"{value}{suffix}").is_file():
                return str(path)
    return value


def _near_name(name: str) -> str:
    """`` (did you mean softmax?)`` for a built-in task's name mistyped, else ''."""
    near = difflib.get_close_matches(name, sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")), n=2)
    return f" (did you mean {' or '.join(near)}?)" if near else ""


def _known(most: int = 8) -> str:
    """The tasks there are, for an error line (task files found here by their look alone)."""
    files = [p for p in _yaml_files(Path.cwd()) if _looks_like_a_task(p)] + _problem_files(Path.cwd())
    shown = ", ".join(_relative(p) for p in files[:most]) + (", ..." if len(files) > most else "")
    here = f"; task files here: {shown}" if files else ""
    builtin = ", ".join(sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")))
    return f"built-in tasks: {builtin}{here} (a task file is named by its path: task=path/to/op.yaml)"


def _is_file(value: str) -> bool:
    value = value.replace("\\:", ":")  # Hydra escapes ':' in the overrides it hands to jobs
    return (value.startswith(FILE_PREFIX) or value.endswith(SUFFIXES) or _problem_file(value)[0] is not None
            or ("/" in value and Path(value).exists()))


def _problem_file(value: str) -> tuple[str | None, str | None]:
    """A PyTorch problem file named as ``PATH.py`` or ``PATH.py:FUNCTION``: (path, function)."""
    path, _, function = value.removeprefix(FILE_PREFIX).partition(".py:")
    if function:
        return (path + ".py", function) if function.isidentifier() else (None, None)
    return (path, None) if path.endswith(".py") else (None, None)


def _register(value: str) -> str:
    from hydra.core.config_store import ConfigStore

    value = value.replace("\\:", ":")
    problem, function = _problem_file(value)
    path = Path(problem or value.removeprefix(FILE_PREFIX)).expanduser()
    if not path.is_file():
        raise EvolveError(f"task file {value.removeprefix(FILE_PREFIX)} not found"
                          + (" (it is a folder: name the YAML file in it)" if path.is_dir() else _near(path)))
    path = path.resolve()
    key = f"{FILE_PREFIX}{path}" + (f":{function}" if function else "")
    group, name = key.rsplit("/", 1)
    if problem:
        try:
            from evolve.task.torch_task import task_config
        except ModuleNotFoundError as exc:
            if exc.name != "torch":
                raise
            raise EvolveError(f"{path.name} is a PyTorch problem: it needs PyTorch where the task is made "
                              "(pip install torch; the CPU build is enough for backend=check)") from None
        node = task_config(path, function)
    else:
        node = read_task_file(path)
    ConfigStore.instance().store(group=f"task/{group}", name=name, node=node)
    return key


def read_task_file(path: Path) -> dict[str, Any]:
    """A task file's configuration, with its folder as ``dir`` and its name defaulting to the
    file's stem."""
    try:
        cfg = yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as exc:
        raise EvolveError(f"task file {path}{_where(exc)}") from None
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise EvolveError(f"task file {path}: cannot be read ({str(exc).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise EvolveError(f"task file {path}: must be a YAML mapping (name, args, sizes, ...)")
    return {"name": path.stem, **cfg, "dir": str(path.parent)}


def with_task_dir(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The task's configuration with the folder of the file Hydra composed it from as ``dir``
    (a task file registered here already has it; a built-in or ``--config-dir`` task gets it
    from the search path)."""
    out = dict(cfg)
    if out.get("dir"):
        return out
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except ValueError:  # not inside a Hydra app
        return out
    choice = hc.runtime.choices.get("task")
    for source in hc.runtime.config_sources:
        path = Path(source.path) / "task" / f"{choice}.yaml"
        if source.schema == "file" and path.is_file():
            out["dir"] = str(path.parent)
            break
    return out


def command_line_name(cfg: Mapping[str, Any]) -> str:
    """How to name this task again on the command line (``task=...``)."""
    d = cfg.get("dir")
    if d and Path(str(d)).resolve() != BUILTIN_DIR.resolve():
        for suffix in SUFFIXES:
            path = Path(str(d)) / f"{cfg.get('name')}{suffix}"
            if path.is_file():
                return str(path)
    return str(cfg.get("name"))


@dataclass(frozen=True)
class Found:
    name: str
    path: Path
    builtin: bool
    seeds: int
    problem: str | None
    pytorch: bool = False  # a PyTorch problem file (not loaded to be listed: that runs its code)


def discover(folders: Sequence[Path]) -> list[Found]:
    """The built-in tasks, then every task file in ``folders`` and two levels down (``op/op.yaml``,
    ``tasks/op/op.yaml`` and the ``--config-dir`` layout ``task/op.yaml``), then the PyTorch
    problem files there."""
    found = [_examine(p, builtin=True) for p in sorted(BUILTIN_DIR.glob("*.yaml"))]
    seen: set[Path] = set()
    for folder in folders:
        for path in _yaml_files(folder):
            path = path.resolve()
            if path not in seen and path.parent != BUILTIN_DIR.resolve() and _looks_like_a_task(path):
                seen.add(path)
                found.append(_examine(path, builtin=False))
        for path in _problem_files(folder):
            if path.resolve() not in seen:
                seen.add(path.resolve())
                found.append(Found(path.stem, path.resolve(), False, 0, None, pytorch=True))
    return found


def _problem_files(folder: Path) -> list[Path]:
    """The PyTorch problem files in ``folder`` and two levels down."""
    scripts = sorted(p for pattern in DEPTH for p in folder.glob(pattern.replace("y*ml", "py")))
    return [p for p in scripts[:MOST_FILES] if _looks_like_a_problem(p)]


_PROBLEM = (re.compile(r"^class Model\b", re.M), re.compile(r"^def get_inputs\(", re.M))


def _looks_like_a_problem(path: Path) -> bool:
    """A PyTorch problem file in KernelBench's format: a ``Model`` class and ``get_inputs()``."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    return path.is_file() and all(p.search(text) for p in _PROBLEM)


def _yaml_files(folder: Path) -> list[Path]:
    return [p for p in sorted(p for pattern in DEPTH for p in folder.glob(pattern))[:MOST_FILES]
            if p.suffix in SUFFIXES and p.is_file()]


def _looks_like_a_task(path: Path) -> bool:
    """A task file, or one meant as one that YAML cannot read (listed with its problem, not left out)."""
    try:
        text = path.read_text()
        cfg = yaml.safe_load(text)
    except yaml.YAMLError:
        return all(f"{key}:" in text for key in ("args", "sizes"))
    except (OSError, UnicodeDecodeError):
        return False
    return isinstance(cfg, dict) and "args" in cfg and "sizes" in cfg


def _where(exc: yaml.MarkedYAMLError) -> str:
    """``:line:column: problem (context at line:column)`` for a YAML error in a task file."""
    mark = exc.problem_mark or exc.context_mark
    at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    context = ""
    if exc.context and exc.context_mark is not None:
        context = f" ({exc.context} at {exc.context_mark.line + 1}:{exc.context_mark.column + 1})"
    return f"{at}: not valid YAML: {exc.problem or exc.context}{context}"


def _near(path: Path) -> str:
    """`` (did you mean ...?)`` with the task files beside a path that does not exist."""
    if not path.parent.is_dir():
        return ""
    others = {p.name: p for p in path.parent.iterdir() if p.suffix in SUFFIXES}
    near = [n for n in others if Path(n).stem == path.stem] or difflib.get_close_matches(path.name, others)
    return f" (did you mean {' or '.join(str(path.parent / n) for n in near)}?)" if near else ""


def _examine(path: Path, builtin: bool) -> Found:
    from evolve.task.task import load_task

    name, seeds, problem = path.stem, 0, None
    try:
        cfg = read_task_file(path)
        name = str(cfg["name"])
        seeds = len(load_task(cfg).seed_paths)
    except EvolveError as exc:
        problem = str(exc).splitlines()[0]
    return Found(name, path, builtin, seeds, problem)


def list_tasks(args: Sequence[str]) -> int:
    """``evolve tasks [FOLDER ...]``: print the tasks there are; 0 when every one loads."""
    if any(a.startswith("-") for a in args):
        print("usage: evolve tasks [FOLDER ...]   (built-in tasks, and task files in the folders "
              "given, default: the working directory, and two levels down)")
        return 0
    folders = [Path(a).expanduser() for a in args] or [Path.cwd()]
    for f in folders:
        if not f.is_dir():
            print(f"evolve: {f} is not a folder", file=sys.stderr)
            return 2
    found = discover(folders)
    width = max(len(f.name) for f in found)
    print("built-in tasks (evolve task=NAME):")
    for f in (f for f in found if f.builtin):
        print(f"  {f.name:<{width}}  {_state(f)}")
    files = [f for f in found if not f.builtin]
    where = ", ".join(str(f) for f in folders)
    print(f"task files in {where} (evolve task=PATH):" if files else f"no task files in {where}")
    for f in files:
        print(f"  {f.name:<{width}}  {_relative(f.path)}  {_state(f)}")
    return 1 if any(f.problem for f in found) else 0


def _state(f: Found) -> str:
    if f.pytorch:
        return "PyTorch problem file (backend=check makes and checks its task)"
    if f.problem:
        return f"PROBLEM: {f.problem}"
    return f"{f.seeds} seed{'s' if f.seeds != 1 else ''}" if f.seeds else "no seeds (an LLM writes the first)"


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
