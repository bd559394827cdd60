"""Refused: dropout in training mode whatever the Model's mode."""
import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, p=0.5, training=True)


n = 1024


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
