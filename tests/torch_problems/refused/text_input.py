"""Refused: a string among the forward's arguments (no kernel argument holds one)."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor, mode: str) -> torch.Tensor:
        return x * 2 if mode == "double" else x


n = 1024


def get_inputs():
    return [torch.randn(n), "double"]


def get_init_inputs():
    return []
