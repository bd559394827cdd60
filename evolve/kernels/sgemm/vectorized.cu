// Block tiling, register blocking, 16-byte loads and a register prefetch, fp32 FFMA only.
// A block of (BM/TM) * (BN/TN) threads computes a BM x BN tile of c, stepping through K in
// slices of BK. While the slice in shared memory is multiplied, the next slice is already on
// its way from global memory into registers (float4 loads when K and N are multiples of 4 and
// the pointers 16-byte aligned, else bounds-checked scalar loads; zeros outside the matrices).
// A is stored transposed (As[k][m], rows padded by 4 floats against bank conflicts on the
// transposing store), B as is. Each thread owns a TM x TN micro-tile made of 4 x 4 sub-tiles
// spaced (BM/TM)*4 rows and (BN/TN)*4 columns apart, so its shared-memory reads are float4s that
// neighbouring threads take from neighbouring addresses (no bank conflicts) and its stores to c
// are coalesced float4s. __launch_bounds__' second argument (MINB blocks per SM) caps registers.
/*@evolve
kernels:
  - name: sgemm_vectorized
    grid: ["ceil_div(N, BN)", "ceil_div(M, BM)"]
    block: (BM // TM) * (BN // TN)
    args: [a, b, c, M, N, K]
tunables:
  BM: {values: [32, 64, 128, 256], default: 128}
  BN: {values: [32, 64, 128, 256], default: 128}
  BK: {values: [8, 16, 32], default: 16}
  TM: {values: [4, 8, 16], default: 8}
  TN: {values: [4, 8, 16], default: 8}
  MINB: {values: [1, 2], default: 1}
restrictions:
  - (BM // TM) * (BN // TN) >= 32
  - (BM // TM) * (BN // TN) <= 256
  - TM * TN <= 128                                       # accumulators stay in registers
  - (BM * BK // 4) % ((BM // TM) * (BN // TN)) == 0     # whole float4s of A per thread
  - (BN * BK // 4) % ((BM // TM) * (BN // TN)) == 0     # whole float4s of B per thread
  - 4 * BK * (BM + 4 + BN) <= 49152                      # static shared memory
*/
#define NT ((BM / TM) * (BN / TN))  // threads per block
#define TROWS (BM / TM)             // threads along M
#define TCOLS (BN / TN)             // threads along N
#define LA (BM * BK / 4 / NT)       // float4s of A each thread loads per slice
#define LB (BN * BK / 4 / NT)       // float4s of B each thread loads per slice
#define APAD 4

// Four consecutive floats of row `row` of a rows x cols matrix from column `col` (col % 4 == 0),
// zeros outside; `vec`: cols % 4 == 0 and the pointer is 16-byte aligned.
__device__ __forceinline__ float4 load4(const float* __restrict__ p, int row, int col, int rows,
                                        int cols, bool vec) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row >= rows) return v;
    const float* q = p + (size_t)row * cols + col;
    if (vec) {
        if (col < cols) v = __ldg(reinterpret_cast<const float4*>(q));
    } else {
        if (col < cols) v.x = __ldg(q);
        if (col + 1 < cols) v.y = __ldg(q + 1);
        if (col + 2 < cols) v.z = __ldg(q + 2);
        if (col + 3 < cols) v.w = __ldg(q + 3);
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
sgemm_vectorized(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                 int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BM + APAD];
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS, tc = tid % TCOLS;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool vec_a = (K % 4 == 0) && ((reinterpret_cast<size_t>(a) & 15) == 0);
    const bool vec_b = (N % 4 == 0) && ((reinterpret_cast<size_t>(b) & 15) == 0);
    const bool vec_c = (N % 4 == 0) && ((reinterpret_cast<size_t>(c) & 15) == 0);

    float4 pa[LA], pb[LB];  // the next slice, in flight
    auto fetch = [&](int k0) {
#pragma unroll
        for (int l = 0; l < LA; ++l) {
            int idx = tid + l * NT;
            pa[l] = load4(a, m0 + idx / (BK / 4), k0 + 4 * (idx % (BK / 4)), M, K, vec_a);
        }
#pragma unroll
        for (int l = 0; l < LB; ++l) {
            int idx = tid + l * NT;
            pb[l] = load4(b, k0 + idx / (BN / 4), n0 + 4 * (idx % (BN / 4)), K, N, vec_b);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    fetch(0);
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int l = 0; l < LA; ++l) {
            int idx = tid + l * NT;
            int mi = idx / (BK / 4), kq = 4 * (idx % (BK / 4));
            As[kq][mi] = pa[l].x;
            As[kq + 1][mi] = pa[l].y;
            As[kq + 2][mi] = pa[l].z;
            As[kq + 3][mi] = pa[l].w;
        }
#pragma unroll
        for (int l = 0; l < LB; ++l) {
            int idx = tid + l * NT;
            *reinterpret_cast<float4*>(&Bs[idx / (BN / 4)][4 * (idx % (BN / 4))]) = pb[l];
        }
        __syncthreads();
        if (k0 + BK < K) fetch(k0 + BK);

#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float ra[TM], rb[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                float4 v = *reinterpret_cast<const float4*>(&As[kk][g * TROWS * 4 + tr * 4]);
                ra[4 * g] = v.x;
                ra[4 * g + 1] = v.y;
                ra[4 * g + 2] = v.z;
                ra[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                float4 v = *reinterpret_cast<const float4*>(&Bs[kk][g * TCOLS * 4 + tc * 4]);
                rb[4 * g] = v.x;
                rb[4 * g + 1] = v.y;
                rb[4 * g + 2] = v.z;
                rb[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int gm = m0 + (i / 4) * TROWS * 4 + tr * 4 + i % 4;
        if (gm >= M) continue;
        float* row = c + (size_t)gm * N;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            int gn = n0 + g * TCOLS * 4 + tc * 4;
            if (vec_c && gn < N) {
                *reinterpret_cast<float4*>(row + gn) =
                    make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (gn + e < N) row[gn + e] = acc[i][4 * g + e];
            }
        }
    }
}
