"""A GEMM with an epilogue: linear layer, then bias-shifted ReLU."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x) + self.shift)


batch = 256
in_features = 512
out_features = 384


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
