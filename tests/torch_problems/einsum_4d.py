"""A 4-D tensor times a matrix through einsum: PyTorch's FLOP counter sees the matmul einsum lowers
to at most sizes, and 0 FLOPs where a size of 1 lowers it to a multiply and a sum."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bijl,lk->bijk", a, b)


b = 4
i = 24
j = 20
inner = 48
cols = 40


def get_inputs():
    return [torch.randn(b, i, j, inner), torch.randn(inner, cols)]


def get_init_inputs():
    return []
