// Reduced precision that looks accurate: each operand split into bf16 hi + lo (x ~ hi + lo to
// 16 bits), three products hi*hi + hi*lo + lo*hi per k in an fp32 accumulator. Relative error
// ~2^-16 per product: far from fp32, yet the old sgemm bound (l2 1e-5 at every K) admitted it.
/*@evolve
kernels:
  - name: sgemm_bf16x3
    grid: ["ceil_div(N, 32)", "ceil_div(M, 8)"]
    block: [32, 8]
    args: [a, b, c, M, N, K]
*/
__device__ __forceinline__ float bf16(float x) {  // round to nearest even at bf16's 8 bits
    unsigned u = __float_as_uint(x);
    return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

extern "C" __global__ void sgemm_bf16x3(const float* __restrict__ a, const float* __restrict__ b,
                                        float* __restrict__ c, int M, int N, int K) {
    int n = blockIdx.x * 32 + threadIdx.x, m = blockIdx.y * 8 + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) {
        float x = a[(size_t)m * K + k], y = b[(size_t)k * N + n];
        float xh = bf16(x), yh = bf16(y), xl = bf16(x - xh), yl = bf16(y - yh);
        acc = fmaf(xl, yh, acc);
        acc = fmaf(xh, yl, acc);
        acc = fmaf(xh, yh, acc);
    }
    c[(size_t)m * N + n] = acc;
}
