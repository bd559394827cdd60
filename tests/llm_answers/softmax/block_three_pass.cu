// One block per row, three passes over the row in global memory, each coalesced (thread t
// touches columns t, t + BLOCK, ...): the row max, the sum of exp(x - max), then the output.
// Each pass's per-thread partials are combined by a tree reduction in shared memory.
/*@evolve
kernels:
  - name: softmax_block_three_pass
    grid: rows
    block: BLOCK
    args: [x, y, rows, cols]
tunables:
  BLOCK: {values: [64, 128, 256, 512, 1024], default: 256}
*/
#define NEG_INF __int_as_float(0xff800000)  // NVRTC has no math.h

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_block_three_pass(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float red[BLOCK];
    const int tid = threadIdx.x;
    const float* __restrict__ xr = x + (size_t)blockIdx.x * cols;
    float* __restrict__ yr = y + (size_t)blockIdx.x * cols;

    // pass 1: row max
    float m = NEG_INF;
    for (int i = tid; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    red[tid] = m;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (tid < half) red[tid] = fmaxf(red[tid], red[tid + half]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();  // everyone has read red[0] before it is reused

    // pass 2: sum of exp(x - max)
    float s = 0.f;
    for (int i = tid; i < cols; i += BLOCK) s += expf(xr[i] - m);
    red[tid] = s;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (tid < half) red[tid] += red[tid + half];
        __syncthreads();
    }
    const float inv = 1.f / red[0];

    // pass 3: write
    for (int i = tid; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) * inv;
}
