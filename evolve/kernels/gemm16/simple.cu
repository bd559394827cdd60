// y = x @ w^T in fp16 or bf16 (the task's ELEM and BF16 defines), fp32 accumulation on CUDA cores:
// no tensor cores, no asynchronous copies, the starting point a tensor-core kernel is bred from.
// A block of (BM/TM) * (BN/TN) threads computes a BM x BN tile of y, stepping through K in
// slices of BK. x and w are both K-contiguous ([M, K] and [N, K]), so both slices are stored
// transposed in shared memory (Xs[k][m], Ws[k][n], widened to fp32 once) and each thread keeps a
// TM x TN tile of fp32 accumulators: TM consecutive rows by TN columns strided by BN/TN. Loads
// are scalar, coalesced along K and zero-filled outside the matrices, so M, N and K need not be
// multiples of anything. y is rounded to ELEM once, at the end.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
/*@evolve
kernels:
  - name: gemm16_simple
    grid: ["ceil_div(N, BN)", "ceil_div(M, BM)"]
    block: (BM // TM) * (BN // TN)
    args: [x, w, "y", M, N, K]
tunables:
  BM: {values: [16, 32, 64, 128], default: 64}
  BN: {values: [16, 32, 64, 128], default: 64}
  BK: {values: [8, 16, 32], default: 16}
  TM: {values: [1, 2, 4, 8], default: 4}
  TN: {values: [1, 2, 4, 8], default: 4}
restrictions:
  - (BM // TM) * (BN // TN) >= 64
  - (BM // TM) * (BN // TN) <= 256
  - (BM * BK) % ((BM // TM) * (BN // TN)) == 0      # whole loads per thread
  - (BN * BK) % ((BM // TM) * (BN // TN)) == 0
*/
#define NT ((BM / TM) * (BN / TN))  // threads per block
#define TCOLS (BN / TN)             // threads along N
#define PAD 1                       // against bank conflicts on the transposing stores

#if BF16
#define TO_FLOAT(v) __bfloat162float(v)
#define FROM_FLOAT(f) __float2bfloat16_rn(f)
#else
#define TO_FLOAT(v) __half2float(v)
#define FROM_FLOAT(f) __float2half_rn(f)
#endif

extern "C" __global__ void __launch_bounds__(NT)
gemm16_simple(const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y,
              int M, int N, int K) {
    __shared__ float Xs[BK][BM + PAD];
    __shared__ float Ws[BK][BN + PAD];

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS;  // rows tr*TM .. tr*TM + TM - 1 of the tile
    const int tc = tid % TCOLS;  // columns tc + j*TCOLS, j < TN
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int l = 0; l < BM * BK / NT; ++l) {  // consecutive threads along k: coalesced
            const int idx = tid + l * NT, mi = idx / BK, ki = idx % BK;
            const int gm = m0 + mi, gk = k0 + ki;
            Xs[ki][mi] = (gm < M && gk < K) ? TO_FLOAT(x[(size_t)gm * K + gk]) : 0.f;
        }
#pragma unroll
        for (int l = 0; l < BN * BK / NT; ++l) {
            const int idx = tid + l * NT, ni = idx / BK, ki = idx % BK;
            const int gn = n0 + ni, gk = k0 + ki;
            Ws[ki][ni] = (gn < N && gk < K) ? TO_FLOAT(w[(size_t)gn * K + gk]) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = Xs[k][tr * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Ws[k][tc + j * TCOLS];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = m0 + tr * TM + i;
        if (gm >= M) break;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int gn = n0 + tc + j * TCOLS;
            if (gn < N) y[(size_t)gm * N + gn] = FROM_FLOAT(acc[i][j]);
        }
    }
}
