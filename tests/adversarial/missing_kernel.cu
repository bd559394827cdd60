// The spec names a kernel the source does not define (it defines vector_add_naive).
/*@evolve
kernels:
  - name: vector_add_fast
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_naive(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
