// Asks for a grid of 2^32 blocks in x (the limit is 2^31 - 1); each block is a no-op past n.
/*@evolve
kernels:
  - name: vector_add_huge_grid
    grid: 4294967296
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_huge_grid(const float* __restrict__ a, const float* __restrict__ b,
                                                float* __restrict__ c, int n) {
    long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
