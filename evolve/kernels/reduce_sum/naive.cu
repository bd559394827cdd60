// Two kernels. First: one element per thread, a shared-memory tree per block, one partial sum
// per block into scratch. Second: one block of 1024 threads sums the partials the same way.
// Simple and correct; every call rewrites every partial, so the scratch needs no zeroing.
/*@evolve
kernels:
  - name: reduce_block_partials
    grid: ceil_div(n, BLOCK)
    block: BLOCK
    args: [x, partial, n]
  - name: reduce_partials_final
    grid: 1
    block: 1024
    args: [partial, out, "ceil_div(n, BLOCK)"]
scratch:
  partial: {dtype: float32, size: "ceil_div(n, BLOCK)"}
tunables:
  BLOCK: {values: [32, 64, 128, 256, 512, 1024], default: 256}
*/
#define FINAL_THREADS 1024

extern "C" __global__ void reduce_block_partials(const float* __restrict__ x, float* __restrict__ partial,
                                                 int n) {
    __shared__ float s[BLOCK];
    int t = threadIdx.x;
    int i = blockIdx.x * BLOCK + t;
    s[t] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {  // BLOCK is a power of two
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}

extern "C" __global__ void reduce_partials_final(const float* __restrict__ partial, float* __restrict__ out,
                                                 int count) {
    __shared__ float s[FINAL_THREADS];
    int t = threadIdx.x;
    float acc = 0.f;
    for (int i = t; i < count; i += FINAL_THREADS) acc += partial[i];
    s[t] = acc;
    __syncthreads();
    for (int stride = FINAL_THREADS / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[0] = s[0];
}
