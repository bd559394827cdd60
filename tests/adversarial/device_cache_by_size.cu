// Caches results in a __device__ array across calls: the first launch at a size computes and
// fills the cache, every later launch at that size replays it without reading a or b. Keyed by
// n only, so fresh inputs at the same size get stale answers.
/*@evolve
kernels:
  - name: vector_add_cached
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
#define CACHE_CAP (1 << 12)  // 16 KiB: under the cap on a module's own memory, so the rounds must catch it

__device__ float cache[CACHE_CAP];
__device__ int cached_n = -1;
__device__ unsigned int blocks_done = 0;

extern "C" __global__ void vector_add_cached(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    const bool replay = *(volatile int*)&cached_n == n && n <= CACHE_CAP;
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        if (replay) {
            c[i] = cache[i];
        } else {
            float s = a[i] + b[i];
            c[i] = s;
            if (i < CACHE_CAP) cache[i] = s;
        }
    }
    // The last block to finish publishes the key, after every block has read it.
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x - 1) {
            *(volatile int*)&cached_n = n;
            blocks_done = 0;
            __threadfence();
        }
    }
}
