// Forbidden include: pulls a host file into the compilation; NVRTC's error log would echo its
// lines back (to the LLM, the run's records).
/*@evolve
kernels:
  - name: vector_add_naive
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
#include "/etc/passwd"

extern "C" __global__ void vector_add_naive(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
