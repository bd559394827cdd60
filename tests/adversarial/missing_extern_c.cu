// The kernel exists but without extern "C": its symbol is C++-mangled (_Z18vector_add_mangled...),
// so the name in the spec is not found in the module.
/*@evolve
kernels:
  - name: vector_add_mangled
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
__global__ void vector_add_mangled(const float* __restrict__ a, const float* __restrict__ b,
                                   float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
