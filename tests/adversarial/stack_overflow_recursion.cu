// Unbounded stack: a recursive device function, a 64-float frame per level, a million levels.
// ptxas cannot size the stack ("cannot be statically determined") and reports 0 bytes for the
// entry function, so a limit on the reported local size lets it through; at run time it
// overflows the per-thread stack (1 KiB by default) on its third or fourth level.
/*@evolve
kernels:
  - name: vector_add_recursive
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
__device__ __noinline__ float deep(const float* a, int i, int depth) {
    volatile float frame[64];
    frame[depth & 63] = a[i];
    if (depth == 0) return frame[0];
    return deep(a, i, depth - 1) + 0.0f * frame[depth & 63];
}

extern "C" __global__ void vector_add_recursive(const float* __restrict__ a, const float* __restrict__ b,
                                                float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = deep(a, i, n + (1 << 20)) + b[i];
}
