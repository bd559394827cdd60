// One block per row: sum of squares in fp32 (warp shuffles, one shared slot per warp), then
// each element scaled and rounded once to bfloat16.
#include <cuda_bf16.h>
/*@evolve
kernels:
  - name: rmsnorm
    grid: rows
    block: BLOCK
    args: [x, w, y, rows, cols]
tunables:
  BLOCK: {values: [64, 128, 256, 512, 1024], default: 256}
*/
extern "C" __global__ void rmsnorm(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                   __nv_bfloat16* __restrict__ y, int rows, int cols) {
    __shared__ float partial[32];
    const long long row = (long long)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
        float v = __bfloat162float(x[row + c]);
        s += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < BLOCK / 32 ? partial[threadIdx.x] : 0.f;
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (threadIdx.x == 0) partial[0] = s;
    }
    __syncthreads();
    const float inv = rsqrtf(partial[0] / cols + EPS);
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
        y[row + c] = __float2bfloat16(__bfloat162float(x[row + c]) * inv * __bfloat162float(w[c]));
    }
}
