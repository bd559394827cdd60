"""A norm whose constructor takes the normalized shape as one tuple of sizes (nothing else gives them)."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


batch = 4
channels = 6
width = 40


def get_inputs():
    return [torch.rand(batch, channels, width)]


def get_init_inputs():
    return [(channels, width)]
