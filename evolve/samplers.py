"""Optuna samplers by name (``search.sampler``), with a clear error for a missing extra."""

from __future__ import annotations

import importlib
import warnings

import optuna
from optuna.samplers import BaseSampler

from evolve.errors import EvolveError

SAMPLERS = ("tpe", "random", "cmaes", "gp", "qmc", "bruteforce")
_NEEDS = {"cmaes": ("cmaes",), "gp": ("torch", "scipy"), "qmc": ("scipy",)}


def make_sampler(name: str, seed: int | None) -> BaseSampler:
    if name not in SAMPLERS:
        raise EvolveError(f"unknown search.sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    for module in _NEEDS.get(name, ()):
        try:
            importlib.import_module(module)
        except ImportError:
            raise EvolveError(
                f"search.sampler={name} needs the {module} package: pip install {module}"
            ) from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        match name:
            case "tpe":
                return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=8)
            case "random":
                return optuna.samplers.RandomSampler(seed=seed)
            case "cmaes":
                return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=4)
            case "gp":
                return optuna.samplers.GPSampler(seed=seed, n_startup_trials=8)
            case "qmc":
                return optuna.samplers.QMCSampler(seed=seed, scramble=True)  # else every seed samples alike
            case _:
                return _Exhaustive(seed=seed)


class _Exhaustive(optuna.samplers.BruteForceSampler):
    """Every configuration once, in random order. Stopping is the tuner's call: the stock
    sampler calls ``study.stop()``, which only works inside ``study.optimize``."""

    def after_trial(self, *args: object, **kwargs: object) -> None:
        pass
