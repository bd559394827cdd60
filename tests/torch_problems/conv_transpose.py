"""A transposed convolution whose stride, padding and output padding are sizes too: output_padding
must stay below stride, and a small input with padding gives an empty output, which PyTorch's meta
device does not check."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int,
                 output_padding: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                       output_padding=output_padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x)).sum(dim=2, keepdim=True)  # an empty conv output would not show


batch = 16
in_channels = 8
out_channels = 16
height, width = 32, 24
kernel_size = 3
stride = 2
padding = 1
output_padding = 1


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
