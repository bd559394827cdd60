// A plausible vectorization bug: float4 over the n / 4 whole groups, the n % 4 tail forgotten.
// Correct whenever n is a multiple of 4 (the timing size is); the correctness sizes are not.
/*@evolve
kernels:
  - name: vector_add_no_tail
    grid: max(1, ceil_div(n // 4, 256))
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_no_tail(const float* __restrict__ a, const float* __restrict__ b,
                                              float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n / 4) {
        float4 x = reinterpret_cast<const float4*>(a)[i];
        float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}
