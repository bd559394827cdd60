# A stand-in for a run's best.py (its ModelNew) for level1/1_relu.py, in PyTorch.
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
