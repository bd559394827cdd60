# A problem file in KernelBench's format, written for this repository's tests.
import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU of a batch of vectors."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch = 8
dim = 1000


def get_inputs():
    return [torch.rand(batch, dim)]


def get_init_inputs():
    return []
