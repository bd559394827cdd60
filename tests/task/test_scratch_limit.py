"""Scratch as large as a kernel needs: bounded by the task's max_scratch_bytes and by the GPU's
memory, no longer by 4x the task's own buffers + 1 MiB (a fused kernel's intermediates, such as a
conv's output before its GroupNorm, outweigh the task's buffers)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from evolve.errors import SpecError
from evolve.evaluate.plan import make_plan
from evolve.hardware import named
from evolve.kernel.spec import Variant
from evolve.paths import CONF_DIR
from evolve.task.task import builtin_task, load_task

HW = named(yaml.safe_load((CONF_DIR / "hardware" / "h200.yaml").read_text()))


def variant(scratch_elements: str) -> Variant:
    return Variant.parse(f"""/*@evolve
kernels:
  - {{name: k, grid: "ceil_div(n, 256)", block: 256, args: [a, b, c, tmp, n]}}
scratch:
  tmp: {{dtype: float32, size: {scratch_elements}}}
*/
extern "C" __global__ void k(const float* a, const float* b, float* c, float* tmp, int n) {{}}
""", name="k")


def test_scratch_many_times_the_tasks_buffers_is_planned() -> None:
    task = builtin_task("vector_add")
    plan = make_plan(variant("16 * n").spec, task, {"n": 1 << 20}, {}, HW)  # 64 MiB beside 12 MiB
    assert plan.scratch[0].count == 16 << 20


def test_the_tasks_setting_bounds_it() -> None:
    cfg = {**builtin_task("vector_add").config, "max_scratch_bytes": 1 << 20}
    task = load_task(cfg)
    make_plan(variant("262144").spec, task, {"n": 10}, {}, HW)
    message = r"too large for this task at \{'n': 10\} \(at most 1048576: the task's max_scratch_bytes"
    with pytest.raises(SpecError, match=message):
        make_plan(variant("262145").spec, task, {"n": 10}, {}, HW)


def test_the_gpus_memory_bounds_it() -> None:
    task = builtin_task("vector_add")
    small = dataclasses.replace(HW, memory_bytes=1 << 30)
    make_plan(variant("134217728").spec, task, {"n": 1000}, {}, HW)  # 512 MiB on an H200
    with pytest.raises(SpecError, match="half the GPU's memory"):
        make_plan(variant("134217728").spec, task, {"n": 1000}, {}, small)


def test_a_negative_setting_is_refused() -> None:
    with pytest.raises(Exception, match="max_scratch_bytes must not be negative"):
        load_task({**builtin_task("vector_add").config, "max_scratch_bytes": -1})


def test_a_named_target_takes_the_devices_own_memory() -> None:
    from evolve.hardware import check_device

    props = {"name": "NVIDIA H200", "major": 9, "minor": 0, "l2_bytes": HW.l2_bytes}
    assert check_device(HW, {**props, "memory_bytes": 150 << 30}).memory_bytes == 150 << 30
    assert check_device(HW, props).memory_bytes == 141 * 10**9  # the datasheet's, where none is read
