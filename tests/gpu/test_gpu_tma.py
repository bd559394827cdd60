"""TMA tensor maps and thread-block clusters on the GPU (pytest -m gpu, Hopper or newer): a TMA
kernel judged right at ragged sizes (partial boxes zero-filled), a cluster launch of the shape the
spec says, maps that cannot reach outside their buffers, and a map encoded again for every
allocation. The kernels are in tma_kernels.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from evolve.evaluate.cupy_backend import CupyBackend
from evolve.evaluate.measurement import Measurement, Status
from evolve.evaluate.plan import make_plan
from evolve.hardware import Hardware
from evolve.kernel.spec import Variant
from evolve.task.files import read_task_file
from evolve.task.task import Task, load_task
from tests.helpers.tasks import QUICK_TIMING as QUICK
from tests.helpers.tma_kernels import CLUSTER_IDS, TASK_FILE, TILE_COPY, TMA_OUTSIDE


def _task(aligned_only: bool = False) -> Task:
    cfg = read_task_file(TASK_FILE)
    if aligned_only:  # rows of whole 16-byte units at every size: a map over x and out everywhere
        cfg["sizes"]["correctness"] = [s for s in cfg["sizes"]["correctness"] if s["cols"] % 4 == 0]
    return load_task(cfg)


@pytest.fixture(scope="module")
def judge() -> Iterator[Any]:
    made: dict[bool, tuple[Task, CupyBackend, Hardware]] = {}

    def evaluate(source: str, tunables: dict[str, int] | None = None, aligned_only: bool = False
                 ) -> Measurement:
        if aligned_only not in made:
            t = _task(aligned_only)
            b = CupyBackend({"timeout_s": 120, "timing": QUICK, "compile_ahead": 0})
            hw = b.start(t, None)
            if int(hw.arch.removeprefix("sm_")) < 90:
                pytest.skip(f"TMA and clusters need Hopper or newer; this GPU is {hw.arch}")
            made[aligned_only] = (t, b, hw)
        t, b, _ = made[aligned_only]
        v = Variant.parse(source)
        return b.evaluate(v, tunables or v.spec.default, t.timing_sizes[:1])

    yield evaluate
    for _, b, _ in made.values():
        b.close()


@pytest.mark.parametrize("tunables", [
    {"BX": 32, "BY": 16, "CLUSTER": 1, "SW": 0},
    {"BX": 4, "BY": 8, "CLUSTER": 2, "SW": 0},  # 16-byte box rows; clusters of 2 (boxes wholly outside x)
    {"BX": 64, "BY": 8, "CLUSTER": 2, "SW": 0},  # 256-byte box rows
    {"BX": 64, "BY": 256, "CLUSTER": 2, "SW": 0},  # 64 KiB boxes: more than 48 KiB of dynamic shared memory
    {"BX": 32, "BY": 16, "CLUSTER": 1, "SW": 128},  # the box in the 128-byte swizzle
])
def test_a_tma_load_is_right_at_ragged_sizes_with_partial_boxes_zero_filled(
        judge: Any, tunables: dict[str, int]) -> None:
    m = judge(TILE_COPY, tunables)
    assert m.status is Status.OK, f"{m.status}: {m.reason}"
    assert next(iter(m.timings.values())).median_s > 0


def test_a_tma_load_of_the_wrong_box_is_judged_wrong(judge: Any) -> None:
    """The controls: what the map loads is really what is checked (a box one column off), and the
    swizzle is the one the spec asked for (the kernel undoes a 128-byte swizzle the map lacks)."""
    m = judge(TILE_COPY.replace("&x_map, x0, y0,", "&x_map, x0 + 4, y0,"))
    assert m.status is Status.WRONG, f"{m.status}: {m.reason}"
    m = judge(TILE_COPY.replace("swizzle: SW,", "swizzle: none,"),
              {"BX": 32, "BY": 16, "CLUSTER": 1, "SW": 128})
    assert m.status is Status.WRONG, f"{m.status}: {m.reason}"


def test_tma_stores_and_loads_outside_the_buffers_are_clipped_and_zero_filled(judge: Any) -> None:
    m = judge(TMA_OUTSIDE, aligned_only=True)
    assert m.status is Status.OK, f"{m.status}: {m.reason}"


def test_a_junk_store_inside_the_buffer_is_seen(judge: Any) -> None:
    """The control: the junk stores do run, so only TMA's clipping kept the others out."""
    m = judge(TMA_OUTSIDE.replace("tma_store(&out_map, cols, y0, j);", "tma_store(&out_map, 0, 0, j);"),
              aligned_only=True)
    assert m.status is Status.WRONG, f"{m.status}: {m.reason}"


def test_a_tma_store_at_negative_coordinates_crashes_and_the_worker_survives(judge: Any) -> None:
    """Found by bisecting the kernel above on the H200 (2026-12-02): stores past the buffer's end
    are clipped, a box starting before it stops the kernel (illegal instruction). That is a
    crash of the candidate, never a pass, and the next candidate runs."""
    m = judge(TMA_OUTSIDE.replace("tma_store(&out_map, cols, y0, j);", "tma_store(&out_map, -BX, -BY, j);"),
              aligned_only=True)
    assert m.status is Status.CRASHED and "illegal instruction" in m.reason, f"{m.status}: {m.reason}"
    assert judge(TMA_OUTSIDE, aligned_only=True).ok


def _local() -> tuple[Task, Hardware]:
    from evolve.evaluate.gpu.device import device_properties
    from evolve.hardware import from_device

    hw = from_device(device_properties(0))
    if int(hw.arch.removeprefix("sm_")) < 90:
        pytest.skip(f"TMA and clusters need Hopper or newer; this GPU is {hw.arch}")
    return _task(), hw


@pytest.mark.parametrize("cx", [1, 2, 4, 8])
def test_a_cluster_launch_has_the_shape_the_spec_says(cx: int) -> None:
    import cupy as cp

    from evolve.evaluate.gpu.device import synchronize
    from evolve.evaluate.gpu.loading import Loaded
    from evolve.kernel.compiler import compile_cuda

    t, hw = _local()
    v = Variant.parse(CLUSTER_IDS)
    sizes = {"rows": 1, "cols": 8}
    plan = make_plan(v.spec, t, sizes, {"CX": cx}, hw)
    assert plan.calls[0].cluster == (cx, 1, 1)
    loaded = Loaded(compile_cuda(CLUSTER_IDS, {"CX": cx}, hw.arch).cubin, {"at": plan}, hw)
    out = cp.full((1, 8), -1, dtype=cp.float32)
    loaded.run(plan, {"x": cp.zeros((1, 8), dtype=cp.float32), "out": out})
    synchronize("in the cluster test")
    got = [int(v) for v in cp.asnumpy(out)[0]]
    # rank in the cluster, cluster size, the cluster's index and the number of clusters along x
    assert got == [b % cx + 16 * cx + 256 * (b // cx) + 4096 * (8 // cx) for b in range(8)]


def test_a_map_is_encoded_again_for_every_allocation_and_only_for_its_own_shape() -> None:
    import cupy as cp

    from evolve.evaluate.gpu.failure import Fail
    from evolve.evaluate.gpu.hopper import Launcher

    t, hw = _local()
    v = Variant.parse(TMA_OUTSIDE)
    plan = make_plan(v.spec, t, {"rows": 37, "cols": 100}, v.spec.default, hw)
    x_map = plan.tensor_maps[0]
    a, b = (cp.zeros((37, 100), dtype=cp.float32) for _ in range(2))
    launcher = Launcher()
    on_a, on_b = launcher.tensor_map(x_map, a), launcher.tensor_map(x_map, b)
    assert on_a.bytes() != on_b.bytes() and set(on_a.bytes()) != {0}
    assert launcher.tensor_map(x_map, a) is on_a  # the same buffer: the cached encoding
    for other in (cp.zeros((38, 100), dtype=cp.float32), cp.zeros((100, 37), dtype=cp.float32),
                  cp.zeros((37, 200), dtype=cp.float32)[:, :100]):
        with pytest.raises(Fail, match=r"the plan's map is over \[37, 100\] with \[400, 4\]"):
            launcher.tensor_map(x_map, other)
