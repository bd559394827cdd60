# A ModelNew for level2/1_linear_bias_relu.py that cannot hold the Model's state.
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()

    def forward(self, x):
        return x
