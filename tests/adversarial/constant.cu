// Writes a constant: every element written, none depends on the inputs.
/*@evolve
kernels:
  - name: vector_add_constant
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_constant(const float* __restrict__ a, const float* __restrict__ b,
                                               float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = 0.5f;
}
