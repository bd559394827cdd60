"""Kernels that compute nothing useful, generated for any task: the evaluator must reject them.

They move raw bits of each argument's storage width, so they fit any dtype (a float kernel writing
a float16 output would write past its end and be caught for that instead)."""

from __future__ import annotations

import numpy as np

from evolve import dtypes
from evolve.kernel.spec import Variant
from evolve.task.task import Task

_BITS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


def null_variants(task: Task) -> dict[str, Variant]:
    out, inp = task.outputs[0], task.inputs[0]
    n = "*".join(f"({e.text})" for e in out.shape)
    m = "*".join(f"({e.text})" for e in inp.shape)
    out_t, in_t = (_BITS[dtypes.get(a.dtype).itemsize] for a in (out, inp))
    constant = dtypes.store(np.array([0.731], np.float32), out.dtype)
    bits = int(constant.view(f"u{constant.itemsize}")[0])
    bodies = {"no-op": "", "zeros": "if (i < n) out[i] = 0;", "constant": f"if (i < n) out[i] = {bits}ULL;"}
    if dtypes.get(inp.dtype).itemsize == dtypes.get(out.dtype).itemsize:
        bodies["identity"] = "if (i < n) out[i] = in[i % m];"
    variants = {}
    for case, body in bodies.items():
        source = f"""/*@evolve
kernels:
  - name: null_kernel
    grid: ceil_div({n}, 256)
    block: 256
    args: ["{out.name}", "{inp.name}", "{n}", "{m}"]
*/
extern "C" __global__ void null_kernel({out_t}* out, const {in_t}* in, int n, int m) {{
    int i = blockIdx.x * 256 + threadIdx.x;
    {body}
}}
"""
        variants[case] = Variant.parse(source, name=f"null-{case}")
    return variants
