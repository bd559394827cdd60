// Unstable: one block per row, one pass for the mean and var = E[x^2] - E[x]^2 (sums of x and x*x,
// no shift). Right where |mean| / std stays near 2 (every ordinary round); once the mean is tens of
// standard deviations from zero the difference of two nearly equal sums cancels and rstd is wrong.
/*@evolve
kernels:
  - name: layernorm_one_pass
    grid: rows
    block: BLOCK
    args: [x, gamma, beta, y, rows, cols]
tunables:
  BLOCK: {values: [256], default: 256}
*/
#define NWARPS (BLOCK / 32)
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    return warp_sum(lane < NWARPS ? sh[lane] : 0.f);
}
extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_one_pass(const float* __restrict__ x, const float* __restrict__ gamma,
                   const float* __restrict__ beta, float* __restrict__ y, int rows, int cols) {
    __shared__ float sh_a[NWARPS], sh_b[NWARPS];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float s1 = 0.f, s2 = 0.f;
    for (int i = threadIdx.x; i < cols; i += BLOCK) {
        const float v = xr[i];
        s1 += v;
        s2 += v * v;
    }
    const float inv_n = 1.f / cols;
    const float mean = block_sum(s1, sh_a) * inv_n;
    const float var = fmaxf(block_sum(s2, sh_b) * inv_n - mean * mean, 0.f);
    const float rstd = rsqrtf(var + EPS);
    for (int i = threadIdx.x; i < cols; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
}
