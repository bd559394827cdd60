// Identity: copies a into c (half the traffic of the real thing); b is never read.
/*@evolve
kernels:
  - name: vector_add_identity
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_identity(const float* __restrict__ a, const float* __restrict__ b,
                                               float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i];
}
