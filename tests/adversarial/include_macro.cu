// Forbidden include through a macro: "#include NAME" with NAME expanding to a host path (the
// worker's environment, which may hold API keys).
/*@evolve
kernels:
  - name: vector_add_naive
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
#define SECRETS "/proc/self/environ"
#include SECRETS

extern "C" __global__ void vector_add_naive(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
