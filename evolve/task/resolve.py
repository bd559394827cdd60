"""Where a task's seed kernels and its reference come from: paths beside the task file or among
the built-in seeds, a built-in reference, a ``module:function`` of the user's imported from the
task's folder, or a PyTorch problem file's Model."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evolve.errors import EvolveError, describe
from evolve.paths import KERNELS_DIR
from evolve.task import references


def resolve_seed(task: str, p: str, base: Path | None) -> Path:
    """Seeds are paths: absolute, or relative to the task file's folder, to kernels/ (the
    built-in tasks' seeds) or to the working directory, in that order."""
    places = [*([base] if base else []), KERNELS_DIR, Path.cwd()]
    for path in (Path(p).expanduser(), *(d / p for d in places)):
        if path.is_absolute() and path.is_file():
            return path.resolve()
    raise EvolveError(f"task {task}: seed kernel {p!r} not found (looked in "
                      f"{', '.join(str(d) for d in places)})")


def resolve_reference(task: str, cfg: Mapping[str, Any], base: Path | None) -> Callable[..., dict[str, Any]]:
    """A PyTorch problem file's Model (a task made by :mod:`evolve.task.torch_task`), else as named."""
    if cfg.get("torch"):
        from evolve.task.torch_reference import TorchReference

        return TorchReference(cfg)
    return _resolve_reference(task, str(cfg.get("reference") or task), base)


def _resolve_reference(task: str, ref: str, base: Path | None) -> Callable[..., dict[str, Any]]:
    """A built-in reference by name, or ``module:function`` imported from the task's folder
    (first on the import path, as a script's own folder is) or from anywhere importable."""
    module, _, func = ref.rpartition(":")
    if not module:
        obj = getattr(references, func, None)
        if not callable(obj):
            raise EvolveError(f"task {task}: reference {ref!r} is not a built-in reference; name your "
                              "own as module:function (module.py beside the task file)")
        return obj
    mod = _import(task, module, base)
    obj = getattr(mod, func, None)
    if not callable(obj):
        raise EvolveError(f"task {task}: reference module {module} ({getattr(mod, '__file__', '?')}) "
                          f"has no function {func!r}")
    return obj


def _import(task: str, module: str, base: Path | None) -> Any:
    if base is not None:
        _use_folder(base)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            where = f"{base} and " if base else ""
            raise EvolveError(f"task {task}: reference module {module!r} not found "
                              f"(looked in {where}the Python path)") from None
        raise EvolveError(f"task {task}: importing reference module {module!r} failed: "
                          f"{describe(exc)}") from None
    except Exception as exc:  # the user's module raised: show what, and where
        raise EvolveError(f"task {task}: importing reference module {module!r} failed: "
                          f"{describe(exc)}") from None


_task_folders: list[str] = []  # put on the import path by _use_folder


def _use_folder(base: Path) -> None:
    """Put the task's folder first on the import path, instead of any other task's folder: a
    module of the same name (``refs``) from another task is not this task's module."""
    folder = str(base)
    for other in [d for d in _task_folders if d != folder]:
        _task_folders.remove(other)
        while other in sys.path:
            sys.path.remove(other)
        for name, mod in list(sys.modules.items()):
            if (getattr(mod, "__file__", None) or "").startswith(other + "/"):
                del sys.modules[name]
    if folder not in _task_folders:
        _task_folders.append(folder)
        sys.path.insert(0, folder)
