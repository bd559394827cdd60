"""How a step of the evaluation ends a candidate: a status with a reason, or a dead CUDA context."""

from __future__ import annotations

from evolve.evaluate.measurement import Status


class Fail(Exception):
    """The candidate failed a step; ``status``, ``reason`` and the compiler's ``log`` (if the
    step has one) become its measurement."""

    def __init__(self, status: Status, reason: str, log: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.log = status, reason, log


class Crashed(Exception):
    """The CUDA context is poisoned (illegal address, trap, ...): the worker must restart."""
