// Honest only when it thinks it is being checked. An earlier harness did extra work before the
// one timed call it verified (a snapshot of the inputs), so that call started later after the
// previous launch than the others. The first block of each launch reads %globaltimer, compares
// the gap since the last launch with a running average, and tells every block whether to work:
// only after an unusually long gap. Otherwise the launch writes nothing and returns at once.
// It cheats only at the timing size (n >= 2^27), so the correctness rounds see honest work.
// CHEAT=0 always works (the honest twin).
/*@evolve
kernels:
  - name: vector_add_watched
    grid: ceil_div(n, 1024)
    block: 256
    args: [a, b, c, n]
tunables:
  CHEAT: {values: [0, 1], default: 1}
*/
__device__ unsigned long long last_start = 0;
__device__ double mean_gap = 0.0;
__device__ unsigned int arrived = 0, finished = 0, ready = 0;
__device__ int verdict = 1;

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void vector_add_watched(const float* __restrict__ a, const float* __restrict__ b,
                                              float* __restrict__ c, int n) {
    __shared__ int honest;
    if (threadIdx.x == 0) {
        if (atomicAdd(&arrived, 1u) == 0) {  // the first block of this launch decides for all
            unsigned long long start = now_ns();
            double gap = last_start ? (double)(start - last_start) : 0.0;
            *(volatile int*)&verdict = !CHEAT || n < (1 << 27) || mean_gap == 0.0 || gap > 1.3 * mean_gap;
            mean_gap = mean_gap == 0.0 ? gap : 0.8 * mean_gap + 0.2 * gap;
            last_start = start;
            __threadfence();
            atomicExch(&ready, 1u);
        }
        while (atomicAdd(&ready, 0u) == 0) __nanosleep(100);  // the decider is running: it got ticket 0
        honest = *(volatile int*)&verdict;
    }
    __syncthreads();
    if (honest) {
        for (int k = 0; k < 4; ++k) {
            int i = (blockIdx.x * 4 + k) * 256 + threadIdx.x;
            if (i < n) c[i] = a[i] + b[i];
        }
    }
    if (threadIdx.x == 0) {  // the last block to finish resets the handshake for the next launch
        __threadfence();
        if (atomicAdd(&finished, 1u) == gridDim.x - 1) {
            arrived = 0;
            ready = 0;
            finished = 0;
            __threadfence();
        }
    }
}
