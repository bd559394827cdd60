// Partial write: half the grid, half the work (i < n / 2); at n = 1 nothing is written at all.
/*@evolve
kernels:
  - name: vector_add_half
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_half(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n / 2) c[i] = a[i] + b[i];
}
