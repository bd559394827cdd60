"""Refused: the output's shape depends on the values."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0]


n = 1024


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
