"""A fused chain: convolution, GroupNorm (its groups must divide the channels), tanh, residual,
logsumexp over the channels."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return torch.logsumexp(y + torch.tanh(self.norm(y)), dim=1, keepdim=True)


batch = 8
in_channels = 4
out_channels = 24
kernel = 3
groups = 6
side = 40


def get_inputs():
    return [torch.randn(batch, in_channels, side, side)]


def get_init_inputs():
    return [in_channels, out_channels, kernel, groups]
