"""Refused: forward updates a buffer."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.calls


n = 1024


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
