// One thread per element of c, a plain fp32 FMA loop over K. threadIdx.x runs along N, so the
// reads of b and the writes of c are coalesced and the reads of a are broadcast. Simple, slow.
/*@evolve
kernels:
  - name: sgemm_naive
    grid: ["ceil_div(N, BX)", "ceil_div(M, BY)"]
    block: [BX, BY]
    args: [a, b, c, M, N, K]
tunables:
  BX: {values: [16, 32, 64], default: 32}
  BY: {values: [1, 2, 4, 8, 16], default: 8}
restrictions:
  - BX * BY >= 64
*/
extern "C" __global__ void sgemm_naive(const float* __restrict__ a, const float* __restrict__ b,
                                       float* __restrict__ c, int M, int N, int K) {
    int n = blockIdx.x * BX + threadIdx.x;
    int m = blockIdx.y * BY + threadIdx.y;
    if (m >= M || n >= N) return;
    const float* ar = a + (size_t)m * K;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc = fmaf(ar[k], b[(size_t)k * N + n], acc);
    c[(size_t)m * N + n] = acc;
}
