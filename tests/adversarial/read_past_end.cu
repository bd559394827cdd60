// Reads one element past the end of a (a[i + 1] at i = n - 1) and lets it reach the result:
// 0.0f * x is not folded without fast math, and 0 * NaN = NaN, so a NaN guard poisons c[n-1].
/*@evolve
kernels:
  - name: vector_add_read_oob
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_read_oob(const float* __restrict__ a, const float* __restrict__ b,
                                               float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + 0.0f * a[i + 1];
}
