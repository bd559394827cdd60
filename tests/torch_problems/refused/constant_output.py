"""What it computes is a constant: the max over a dimension, minus its own mean over that
dimension of one element, is 0 everywhere (a degenerate problem, as KernelBench has)."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x).max(dim=1, keepdim=True).values
        return torch.nn.functional.gelu(h - h.mean(dim=1, keepdim=True))


batch = 64
features = 96


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
