"""cuda-evolve: evolve and tune CUDA kernels with an evaluator that cannot be fooled."""

__version__ = "0.1.0"
