// 64 KiB of per-thread local memory (a volatile array indexed at run time stays on the stack):
// ptxas reports a 65536-byte stack frame; at 2048 threads per SM that is 128 MiB per SM.
/*@evolve
kernels:
  - name: vector_add_big_stack
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
#define LOCAL_FLOATS 16384  // 64 KiB

extern "C" __global__ void vector_add_big_stack(const float* __restrict__ a, const float* __restrict__ b,
                                                float* __restrict__ c, int n) {
    volatile float stack[LOCAL_FLOATS];
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= n) return;
    int slot = (i * 7919) % LOCAL_FLOATS;
    stack[slot] = a[i];
    c[i] = stack[slot] + b[i];
}
