"""An ill-conditioned Model: a linear layer, GroupNorm, then the mean of its outputs. At the huge
stress round the linear layer's outputs square past float32's range inside GroupNorm, so the
Model's own float32 run misses the output's tolerance there: a round that cannot judge a kernel."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, features: int, channels: int, groups: int):
        super().__init__()
        self.linear = nn.Linear(features, channels)
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.linear(x).unsqueeze(-1))
        return y.mean(dim=[1, 2])


batch = 16
features = 96
channels = 24
groups = 8


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features, channels, groups]
