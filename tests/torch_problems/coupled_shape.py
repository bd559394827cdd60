"""A value derived from a size that only fits at the file's sizes: LayerNorm over the last
dimension (twice the width) with its shape written as (channels,), equal only because the file
makes them so (as KernelBench's level 2 problem 3 does, after a transposed convolution).
Following the derived value admits no smaller size; kept as the file has it, width stays and the
rest can shrink."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, channels: int, norm_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(channels, 1))
        self.norm = nn.LayerNorm(norm_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.cat([x, x], dim=-1) * self.scale)


batch = 8
channels = 32
width = 16
norm_shape = (channels,)


def get_inputs():
    return [torch.randn(batch, channels, width)]


def get_init_inputs():
    return [channels, norm_shape]
