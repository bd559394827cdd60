# A problem file in KernelBench's format, written for this repository's tests.
import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer, an extra bias and a ReLU: a small GEMM with an epilogue."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x) + self.bias)


batch = 32
in_features = 96
out_features = 80


def get_inputs():
    return [torch.rand(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
