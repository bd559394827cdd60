"""A multi-output op: the largest value of each row and where it is."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, where = torch.max(x, dim=1)
        return values, where


rows = 300
cols = 700


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
