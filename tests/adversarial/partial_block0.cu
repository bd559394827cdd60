// Partial write: only block 0 works, so only the first 256 elements are ever written.
/*@evolve
kernels:
  - name: vector_add_block0
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_block0(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (blockIdx.x == 0 && i < n) c[i] = a[i] + b[i];
}
