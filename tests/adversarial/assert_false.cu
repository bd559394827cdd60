// A failing device-side assert. NVRTC declares assert without any include (it calls
// __assertfail); it prints one line and poisons the context (device-side assert triggered).
/*@evolve
kernels:
  - name: vector_add_assert
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_assert(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    if (i == 0) assert(n < 0);
}
