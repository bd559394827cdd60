"""The overhead section's measure of a call's host cost, without a GPU: a stand-in launch queue
that makes the caller wait once it is full, as the driver's does when the kernel is slower than its
launch."""

from __future__ import annotations

import time

from evolve.bench.overhead import BATCH, per_call

HOST_S = 20e-6  # what the stand-in call costs the host
GPU_S = 200e-6  # what its kernel takes on the stand-in GPU: ten times the launch


class Queue:
    """Launches that the stand-in GPU runs one after another; a launch into a full queue waits."""

    def __init__(self, depth: int):
        self.depth, self.pending = depth, 0

    def launch(self) -> None:
        end = time.perf_counter() + HOST_S
        if self.pending >= self.depth:  # full: wait for the oldest kernel to finish
            end += GPU_S
            self.pending -= 1
        self.pending += 1
        while time.perf_counter() < end:
            pass

    def sync(self) -> None:
        time.sleep(self.pending * GPU_S)
        self.pending = 0


def test_a_slow_kernel_does_not_pass_its_gpu_time_off_as_host_time() -> None:
    queue = Queue(depth=2 * BATCH)
    host, wall = per_call({"k": queue.launch}, 4 * BATCH, queue.sync)["k"]
    assert host < 2 * HOST_S * 1e6  # the launch's cost, not the kernel's (10x more)
    assert wall >= GPU_S * 1e6  # the wall time still counts the GPU's work


def test_a_queue_shallower_than_a_batch_shows_as_host_time() -> None:
    """The converse, so that the first test can fail: had the queue filled, the host would wait."""
    queue = Queue(depth=BATCH // 4)
    host, _ = per_call({"k": queue.launch}, 2 * BATCH, queue.sync)["k"]
    assert host > 0.5 * GPU_S * 1e6
