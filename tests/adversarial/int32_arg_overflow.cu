// An integer argument that does not fit the kernel's int parameter at the larger sizes (n * n is
// 10^12 at n = 1000003): passed as int32 it would silently wrap.
/*@evolve
kernels:
  - name: vector_add_wide_arg
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n, "n * n"]
*/
extern "C" __global__ void vector_add_wide_arg(const float* __restrict__ a, const float* __restrict__ b,
                                               float* __restrict__ c, int n, int n_squared) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n && n_squared >= 0) c[i] = a[i] + b[i];
}
