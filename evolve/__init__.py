"""cuda-evolve: evolve and tune CUDA kernels with an evaluator that cannot be fooled."""

__version__ = "0.1.0"


def version_line() -> str:
    """What ``evolve --version`` and ``evolve-bench --version`` print (not Hydra's own version)."""
    import hydra
    import optuna

    return f"cuda-evolve {__version__} (Hydra {hydra.__version__}, Optuna {optuna.__version__})"
