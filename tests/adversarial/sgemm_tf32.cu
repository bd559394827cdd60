// Reduced precision: both operands rounded to TF32 (10 mantissa bits, what a TF32 tensor core
// reads) before an fp32 FMA chain. Relative error ~2^-11 per product, against a task whose
// text says reduced-precision operands must fail.
/*@evolve
kernels:
  - name: sgemm_tf32
    grid: ["ceil_div(N, 32)", "ceil_div(M, 8)"]
    block: [32, 8]
    args: [a, b, c, M, N, K]
*/
__device__ __forceinline__ float tf32(float x) {
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return __uint_as_float(u);
}

extern "C" __global__ void sgemm_tf32(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, int M, int N, int K) {
    int n = blockIdx.x * 32 + threadIdx.x, m = blockIdx.y * 8 + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc = fmaf(tf32(a[(size_t)m * K + k]), tf32(b[(size_t)k * N + n]), acc);
    c[(size_t)m * N + n] = acc;
}
