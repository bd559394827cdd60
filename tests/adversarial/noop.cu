// No-op: launches, touches nothing. The outputs keep the harness's NaN pre-fill.
/*@evolve
kernels:
  - name: vector_add_noop
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_noop(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {}
