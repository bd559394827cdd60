// Shared-memory block tiling with register blocking, fp32 FFMA only. A block of
// (BM/TM) * (BN/TN) threads computes a BM x BN tile of c, stepping through K in slices of BK:
// the A slice is stored transposed (As[k][m], rows padded by 4 floats against bank conflicts
// on the transposing store) and the B slice as is (Bs[k][n]). Each thread keeps a TM x TN
// micro-tile of accumulators: TM consecutive rows (read from As as contiguous, 16-byte aligned
// runs) by TN columns strided by BN/TN (conflict-free reads of Bs, coalesced stores of c).
// Global loads are scalar and coalesced, zero-filled outside the matrices, so M, N and K need
// not be multiples of anything.
/*@evolve
kernels:
  - name: sgemm_blocktiled
    grid: ["ceil_div(N, BN)", "ceil_div(M, BM)"]
    block: (BM // TM) * (BN // TN)
    args: [a, b, c, M, N, K]
tunables:
  BM: {values: [32, 64, 128, 256], default: 128}
  BN: {values: [32, 64, 128, 256], default: 128}
  BK: {values: [4, 8, 16, 32], default: 8}
  TM: {values: [4, 8, 16], default: 8}
  TN: {values: [1, 2, 4, 8, 16], default: 8}
restrictions:
  - (BM // TM) * (BN // TN) >= 32
  - (BM // TM) * (BN // TN) <= 256
  - TM * TN <= 128                                  # accumulators stay in registers
  - (BM * BK) % ((BM // TM) * (BN // TN)) == 0      # whole loads per thread
  - (BN * BK) % ((BM // TM) * (BN // TN)) == 0
  - 4 * BK * (BM + 4 + BN) <= 49152                 # static shared memory
*/
#define NT ((BM / TM) * (BN / TN))  // threads per block
#define TCOLS (BN / TN)             // threads along N
#define APAD 4

extern "C" __global__ void __launch_bounds__(NT)
sgemm_blocktiled(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                 int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BM + APAD];
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS;  // micro-tile rows tr*TM .. tr*TM + TM - 1
    const int tc = tid % TCOLS;  // micro-tile cols tc + j*TCOLS, j < TN
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // A slice: BM x BK, consecutive threads along k (row-major a), stored transposed
#pragma unroll
        for (int l = 0; l < BM * BK / NT; ++l) {
            int idx = tid + l * NT;
            int mi = idx / BK, ki = idx % BK;
            int gm = m0 + mi, gk = k0 + ki;
            As[ki][mi] = (gm < M && gk < K) ? a[(size_t)gm * K + gk] : 0.f;
        }
        // B slice: BK x BN, consecutive threads along n
#pragma unroll
        for (int l = 0; l < BK * BN / NT; ++l) {
            int idx = tid + l * NT;
            int ki = idx / BN, ni = idx % BN;
            int gk = k0 + ki, gn = n0 + ni;
            Bs[ki][ni] = (gk < K && gn < N) ? b[(size_t)gk * N + gn] : 0.f;
        }
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float ra[TM], rb[TN];
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                float4 v = *reinterpret_cast<const float4*>(&As[kk][tr * TM + i]);
                ra[i] = v.x;
                ra[i + 1] = v.y;
                ra[i + 2] = v.z;
                ra[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) rb[j] = Bs[kk][tc + j * TCOLS];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int gm = m0 + tr * TM + i;
        if (gm < M) {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                int gn = n0 + tc + j * TCOLS;
                if (gn < N) c[(size_t)gm * N + gn] = acc[i][j];
            }
        }
    }
}
