"""A scalar output: the mean cross-entropy loss of logits against class indices."""
import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


batch = 1024
classes = 100


def get_inputs():
    return [torch.randn(batch, classes), torch.randint(0, classes, (batch,))]


def get_init_inputs():
    return []
