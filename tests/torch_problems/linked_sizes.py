"""Sizes tied by a relation: a transposed convolution doubles the length, and the LayerNorm after
it normalises the last dimension over out_channels, so the file works only where 2 * length
(+ the kernel's overhang) equals out_channels. No size can shrink alone; all of them together
can (KernelBench's level 2 has such a problem)."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=2, padding=1)
        self.norm = nn.LayerNorm(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.up(x)))


batch = 16
in_channels = 16
out_channels = 32
length = 16
kernel_size = 4


def get_inputs():
    return [torch.randn(batch, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
