// Device-side malloc without free: every thread takes 4 KiB of the device heap (8 MiB by default)
// on every launch and keeps the pointer. The heap runs dry within the n = 1000 launches, malloc
// returns NULL, and the unchecked store through it is an illegal memory access.
/*@evolve
kernels:
  - name: vector_add_leak
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
__device__ float* leaked[4096];

extern "C" __global__ void vector_add_leak(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        float* p = static_cast<float*>(malloc(4096));
        leaked[i & 4095] = p;  // the pointer escapes: the allocation cannot be optimized away
        p[0] = a[i];
        c[i] = p[0] + b[i];
    }
}
