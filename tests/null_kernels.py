"""Kernels that compute nothing useful, generated for any task: the evaluator must reject them."""

from __future__ import annotations

from evolve.spec import Variant
from evolve.task import Task

BODIES = {
    "no-op": "",
    "zeros": "if (i < n) out[i] = 0.0f;",
    "constant": "if (i < n) out[i] = 0.731f;",
    "identity": "if (i < n) out[i] = in[i % m];",
}


def null_variants(task: Task) -> dict[str, Variant]:
    out, inp = task.outputs[0], task.inputs[0]
    n = "*".join(f"({e.text})" for e in out.shape)
    m = "*".join(f"({e.text})" for e in inp.shape)
    variants = {}
    for case, body in BODIES.items():
        source = f"""/*@evolve
kernels:
  - name: null_kernel
    grid: ceil_div({n}, 256)
    block: 256
    args: [{out.name}, {inp.name}, "{n}", "{m}"]
*/
extern "C" __global__ void null_kernel(float* out, const float* in, int n, int m) {{
    int i = blockIdx.x * 256 + threadIdx.x;
    {body}
}}
"""
        variants[case] = Variant.parse(source, name=f"null-{case}")
    return variants
