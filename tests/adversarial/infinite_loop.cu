// Computes the right answer, then thread 0 waits forever on a flag nobody sets. The flag is a
// volatile global, so the loop cannot be removed as side-effect free; the launch never ends.
/*@evolve
kernels:
  - name: vector_add_hang
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
__device__ volatile int never_set = 0;

extern "C" __global__ void vector_add_hang(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    if (i == 0) {
        while (never_set == 0) {
            __nanosleep(1000);
        }
    }
}
