// The control: 3xTF32 is fp32-accurate (x = hi + lo in TF32 to ~22 bits, three products per k,
// the small ones first) and must pass sgemm's derived tolerance: a tolerance so tight that it
// refuses this would refuse the fast tensor-core GEMMs that are right.
/*@evolve
kernels:
  - name: sgemm_3xtf32
    grid: ["ceil_div(N, 32)", "ceil_div(M, 8)"]
    block: [32, 8]
    args: [a, b, c, M, N, K]
*/
__device__ __forceinline__ float tf32(float x) {
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return __uint_as_float(u);
}

extern "C" __global__ void sgemm_3xtf32(const float* __restrict__ a, const float* __restrict__ b,
                                        float* __restrict__ c, int M, int N, int K) {
    int n = blockIdx.x * 32 + threadIdx.x, m = blockIdx.y * 8 + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) {
        float x = a[(size_t)m * K + k], y = b[(size_t)k * N + n];
        float xh = tf32(x), yh = tf32(y), xl = tf32(x - xh), yl = tf32(y - yh);
        acc = fmaf(xl, yh, acc);
        acc = fmaf(xh, yl, acc);
        acc = fmaf(xh, yh, acc);
    }
    c[(size_t)m * N + n] = acc;
}
