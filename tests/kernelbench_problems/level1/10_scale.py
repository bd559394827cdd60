# A problem file in KernelBench's format, written for this repository's tests.
import torch
import torch.nn as nn


class Model(nn.Module):
    """A vector times a scalar given to the constructor."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


n = 4096


def get_inputs():
    return [torch.rand(n)]


def get_init_inputs():
    return [0.5]
