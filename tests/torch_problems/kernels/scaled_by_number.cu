// tests/torch_problems/scaled_by_number.py: out = a * s + 1 with s = 2.5, the constant the task
// froze (it is no kernel argument). WRONG=1 scales by 2 (the wrong kernel the GPU test must catch).
/*@evolve
kernels:
  - name: scaled
    grid: ceil_div(rows * cols, BLOCK)
    block: BLOCK
    args: [a, out, rows * cols]
tunables:
  BLOCK: {values: [128, 256], default: 256}
  WRONG: {values: [0, 1], default: 0}
*/
extern "C" __global__ void scaled(const float* __restrict__ a, float* __restrict__ out, int n) {
    const int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) out[i] = a[i] * (WRONG ? 2.0f : 2.5f) + 1.0f;
}
