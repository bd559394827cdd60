// Lower precision than allowed: rounds both inputs to fp16 and adds in fp16 (__hadd). Relative
// error ~2^-11 (5e-4), far above the task's rtol of 1e-6.
/*@evolve
kernels:
  - name: vector_add_half_precision
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
#include <cuda_fp16.h>

extern "C" __global__ void vector_add_half_precision(const float* __restrict__ a, const float* __restrict__ b,
                                                     float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = __half2float(__hadd(__float2half(a[i]), __float2half(b[i])));
}
