// One parameter more than the spec passes: the driver reads a fifth argument pointer past the end
// of the harness's list (whatever is next in the worker's memory).
/*@evolve
kernels:
  - name: vector_add_extra
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_extra(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int n, const float* __restrict__ extra) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + (extra == a ? 1.f : 0.f);
}
