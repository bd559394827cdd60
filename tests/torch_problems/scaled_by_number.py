"""A forward argument that is a Python number: a matrix scaled by s, given by get_inputs() beside
the tensor (as KernelBench's matrix-scalar problem does). The number is frozen into the kernel."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, s: float) -> torch.Tensor:
        return a * s + 1.0


rows = 96
cols = 320


def get_inputs():
    return [torch.randn(rows, cols), 2.5]


def get_init_inputs():
    return []
