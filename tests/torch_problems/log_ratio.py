"""Inputs that must be positive: the mean log-ratio of two probability tables."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return (p * (torch.log(p) - torch.log(q))).sum(dim=1).mean()


rows = 64
cols = 500


def get_inputs():
    return [torch.randn(rows, cols).softmax(dim=1), torch.randn(rows, cols).softmax(dim=1)]


def get_init_inputs():
    return []
