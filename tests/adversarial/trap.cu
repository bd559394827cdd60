// Computes the right answer, then thread 0 executes __trap(): the context is poisoned.
/*@evolve
kernels:
  - name: vector_add_trap
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_trap(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    if (i == 0) __trap();
}
