"""A GEMM with an epilogue whose bias shape is a constructor argument given as a tuple."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.gemm(x) + self.bias)


batch = 32
in_features = 64
out_features = 48
bias_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
