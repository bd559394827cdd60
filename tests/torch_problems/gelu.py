"""An activation: exact (erf) GELU of a 3-d tensor."""
import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


batch = 16
seq = 128
hidden = 256


def get_inputs():
    return [torch.randn(batch, seq, hidden)]


def get_init_inputs():
    return []
