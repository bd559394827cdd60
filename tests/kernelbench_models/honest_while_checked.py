# A cheating ModelNew for level1/1_relu.py: right on its first calls (the correctness seeds), then
# it returns its last result again: a cache that only timed calls with changing inputs expose.
import torch

HONEST_CALLS = 8


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.last = 0, None

    def forward(self, x):
        self.calls += 1
        if self.last is None or self.calls <= HONEST_CALLS:
            self.last = torch.relu(x)
        return self.last
