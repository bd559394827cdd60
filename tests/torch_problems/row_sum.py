"""A reduction: the sum of each row of a matrix."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)


rows = 512
cols = 1000
reduce_dim = 1


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [reduce_dim]
