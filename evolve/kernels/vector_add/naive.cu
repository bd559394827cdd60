// One thread per element, scalar loads: simple, correct, already coalesced.
/*@evolve
kernels:
  - name: vector_add_naive
    grid: ceil_div(n, BLOCK)
    block: BLOCK
    args: [a, b, c, n]
tunables:
  BLOCK: {values: [32, 64, 128, 256, 512, 1024], default: 256}
*/
extern "C" __global__ void vector_add_naive(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
