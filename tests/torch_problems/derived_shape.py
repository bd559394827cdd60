"""Sizes that shape the inputs through other module-level values: a tuple built from one
(`input_shape = (classes,)`), a product, and two sizes assigned in one statement."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(classes))

    def forward(self, logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return (logits * self.scale).log_softmax(dim=-1) + bias.view(1, -1)


batch, classes = 384, 1000
input_shape = (classes,)
flat = batch * 1  # derived, shapes nothing


def get_inputs():
    return [torch.randn(batch, *input_shape), torch.randn(input_shape[0])]


def get_init_inputs():
    return [classes]
