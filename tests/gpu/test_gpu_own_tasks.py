"""Tasks of a user's own on the GPU (pytest -m gpu): every dtype and distribution made alike on the
device and the host, the test's own tasks (integer output with ties, bfloat16, inout) judged right
and wrong, fp8/fp16/bool/permutation arguments.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from evolve import dtypes
from evolve.evaluate.cupy_backend import CupyBackend
from evolve.evaluate.measurement import Measurement, Status
from evolve.kernel.spec import Variant
from evolve.task.files import read_task_file
from evolve.task.inputs import DISTS, INT_VALUED, Draw, fill
from evolve.task.task import Task, load_task
from tests.helpers.tasks import QUICK_TIMING as QUICK

OWN = Path(__file__).parents[1] / "own_tasks"
DRAWS = {"normal": Draw("normal", a=2.0, b=-0.5), "uniform": Draw("uniform", a=-3.0, b=5.0),
         "randint": Draw("randint", lo=-100, hi=100), "ties": Draw("ties", a=0.75, b=0.25, hi=7),
         "permutation": Draw("permutation"), "bernoulli": Draw("bernoulli", p=0.3)}


def own(name: str) -> Task:
    return load_task(read_task_file(OWN / name / f"{name}.yaml"))


def evaluate(t: Task, source: str | None = None, tunables: dict[str, int] | None = None) -> Measurement:
    v = Variant.parse(source) if source else t.seeds()[0]
    b = CupyBackend({"timeout_s": 300, "timing": QUICK, "compile_ahead": 0})
    try:
        b.start(t, None)
        return b.evaluate(v, tunables if tunables is not None else v.spec.default, t.timing_sizes[:1])
    finally:
        b.close()


@pytest.mark.parametrize(("dist", "dtype"), list(itertools.product(DISTS, dtypes.DTYPES)))
def test_the_device_makes_the_values_the_host_makes(dist: str, dtype: str) -> None:
    import cupy as cp

    kind, n, d = dtypes.get(dtype).kind, 100_003, DRAWS[dist]
    if dist == "permutation" and dtypes.get(dtype).itemsize == 1:
        n = 2 if kind == "bool" else 128  # what fits
    if dist == "randint" and (kind == "bool" or dtype.startswith("uint")):
        d = Draw("randint", lo=0, hi=1 if kind == "bool" else 200)
    host = np.empty(n, dtype=dtypes.storage(dtype))
    fill(np, host, dtype, d, 12345)
    dev = cp.empty(n, dtype=dtypes.storage(dtype))
    fill(cp, dev, dtype, d, 12345)
    got = cp.asnumpy(dev)
    if dist in INT_VALUED or dist in ("uniform", "ties"):  # integer or correctly rounded float arithmetic
        assert np.array_equal(got, host)
    else:  # normal: the device's logf/cospif differ from NumPy's in the last bits of a float32
        wide_got, wide_host = dtypes.widen(np, got, dtype), dtypes.widen(np, host, dtype)
        tol = dtypes.get(dtype).tolerance
        if dtypes.get(dtype).itemsize < 4:  # rounded to a narrower format: a last-bit difference rarely shows
            assert np.mean(got == host) > 0.98
        rtol = max(1e-5, 2 * tol.rtol if tol is not None else 0.0)
        assert np.allclose(wide_got, wide_host, rtol=rtol, atol=rtol * np.abs(wide_host).max())


@pytest.mark.parametrize("name", ["row_argmax", "bf16_rmsnorm", "histogram"])
def test_the_own_tasks_seeds_pass(name: str) -> None:
    m = evaluate(own(name))
    assert m.ok, m.reason


WRONG = {
    # the last index of the maximum: wrong where a row's maximum is tied (16 levels: always)
    "row_argmax": ("row_argmax", "if (row[c] > best)", "if (row[c] >= best)", "differ"),
    # the weight forgotten
    "bf16_rmsnorm": ("rmsnorm", "* __bfloat162float(w[c])", "", "outside tolerance"),
    # a plain increment races with the other threads of the same bin
    "histogram": ("histogram", "atomicAdd(&counts[values[i]], 1)", "counts[values[i]] += 1", "differ"),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_the_own_tasks_catch_a_wrong_kernel(name: str) -> None:
    t = own(name)
    _, old, new, reason = WRONG[name]
    source = t.seeds()[0].source
    assert old in source
    m = evaluate(t, source.replace(old, new))
    assert m.status is Status.WRONG and reason in m.reason, m.reason


def test_an_inout_kernel_that_leaves_its_argument_is_wrong_not_unwritten() -> None:
    t = own("histogram")
    source = t.seeds()[0].source.replace("if (i < n) atomicAdd", "if (i < 0) atomicAdd")
    m = evaluate(t, source)
    assert m.status is Status.WRONG and "differ" in m.reason and "not written" not in m.reason


MASKED_GATHER = """/*@evolve
kernels:
  - {name: masked_gather, grid: "ceil_div(n, 256)", block: 256, args: [x, perm, mask, out, n]}
*/
#include <cuda_fp16.h>
extern "C" __global__ void masked_gather(const __half* x, const long long* perm, const bool* mask,
                                         __half* out, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) out[i] = mask[i] ? x[perm[i]] : __float2half(0.0f);
}
"""
DEQUANT = """/*@evolve
kernels:
  - {name: dequant, grid: "ceil_div(n, 256)", block: 256, args: [q, y, n]}
*/
#include <cuda_fp8.h>
extern "C" __global__ void dequant(const __nv_fp8_e4m3* q, float* y, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) y[i] = 2.0f * float(q[i]);
}
"""


def test_fp16_permutation_and_bool_arguments(tmp_path: Path) -> None:
    seed = tmp_path / "masked_gather.cu"
    seed.write_text(MASKED_GATHER)
    t = load_task({
        "name": "masked_gather", "reference": "tests.helpers.task_refs:masked_gather", "seeds": [str(seed)],
        "args": {"x": {"role": "input", "dtype": "float16", "shape": ["n"]},
                 "perm": {"role": "input", "dtype": "int64", "shape": ["n"], "init": {"dist": "permutation"}},
                 "mask": {"role": "input", "dtype": "bool", "shape": ["n"]},
                 "out": {"role": "output", "dtype": "float16", "shape": ["n"]}},
        "sizes": {"correctness": [{"n": 1}, {"n": 1000}, {"n": 100003}], "timing": [{"n": 1 << 24}]},
        "traffic": {"bytes": "13 * n"},
    })
    assert evaluate(t).ok
    m = evaluate(t, MASKED_GATHER.replace("x[perm[i]]", "x[i]"))
    assert m.status is Status.WRONG


def test_fp8_inputs(tmp_path: Path) -> None:
    seed = tmp_path / "dequant.cu"
    seed.write_text(DEQUANT)
    t = load_task({
        "name": "dequant", "reference": "tests.helpers.task_refs:dequant", "seeds": [str(seed)],
        "args": {"q": {"role": "input", "dtype": "float8_e4m3fn", "shape": ["n"]},
                 "y": {"role": "output", "dtype": "float32", "shape": ["n"]}},
        "sizes": {"correctness": [{"n": 1}, {"n": 1000}, {"n": 100003}], "timing": [{"n": 1 << 24}]},
        "tolerance": {"atol": 0, "rtol": 0, "l2": 0},
        "traffic": {"bytes": "5 * n"},
    })
    assert evaluate(t).ok
    assert evaluate(t, DEQUANT.replace("2.0f *", "2.001f *")).status is Status.WRONG
