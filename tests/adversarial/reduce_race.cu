// reduce_sum with a race between blocks: each block sums its 256 elements correctly, then adds
// its partial into one global accumulator with a plain (non-atomic) load, pause, store. Exact
// while there is one block (n <= 256); blocks that overlap lose each other's updates beyond that.
/*@evolve
kernels:
  - name: reduce_racy_partials
    grid: ceil_div(n, 256)
    block: 256
    args: [x, total, n]
  - name: reduce_racy_store
    grid: 1
    block: 32
    args: [total, out]
scratch:
  total: {dtype: float32, size: 1, zero: true}
*/
extern "C" __global__ void reduce_racy_partials(const float* __restrict__ x, float* total, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    int i = blockIdx.x * 256 + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) {
        volatile float* acc = total;
        float seen = *acc;     // read ...
        __nanosleep(2000);     // ... (widen the window a little) ...
        *acc = seen + s[0];    // ... write: not atomic, so concurrent blocks overwrite each other
    }
}

extern "C" __global__ void reduce_racy_store(const float* __restrict__ total, float* __restrict__ out) {
    if (threadIdx.x == 0) out[0] = total[0];
}
