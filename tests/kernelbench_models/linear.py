# A stand-in for a run's best.py for level2/1_linear_bias_relu.py: the Model's parameters by name.
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)
        self.bias = torch.nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return torch.relu(torch.addmm(self.linear.bias + self.bias, x, self.linear.weight.t()))
