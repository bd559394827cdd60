"""A norm: LayerNorm over the last dimension, with its affine parameters."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


batch = 64
features = 768


def get_inputs():
    return [torch.rand(batch, features)]


def get_init_inputs():
    return [features]
