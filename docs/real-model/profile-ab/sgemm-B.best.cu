// cuda-evolve: best kernel of run rm-sgemm, task sgemm, on NVIDIA H200.
// 2.457 ms: 55.9 TFLOP/s = 83.5% of the 67.0 TFLOP/s fp32 datasheet peak (82 GB/s; 83.5% of the roofline).
// Tunables and the task's defines are baked in as #defines below: it compiles on its own.
// best.py beside it launches it on CuPy arrays or PyTorch tensors.
// Launch at M=4096,N=4096,K=4096:
//   sgemm_3xtf32_mma<<<(32, 32, 1), (512, 1, 1), 71680>>>(a, b, c, 4096, 4096, 4096)
#define TC_BK 32
#define TC_BM 128
#define TC_BN 128
#define TC_GROUP 8
#define TC_MINB 1
#define TC_STAGES 2
#define TC_WM 4
#define TC_WN 4
// Two-kernel fp32 SGEMM (plain fp32 FMA everywhere).
// 1) transpose_a: at[Kp][Mp] = a^T, zero-padded to multiples of the block tile (Mp = ceil(M/BM)*BM,
//    Kp = ceil(K/BK)*BK), so A tiles are k-major, 16B aligned and never out of bounds.
// 2) sgemm_tiled: block tile BM x BN, K-slice BK, STAGES-deep cp.async ring in dynamic shared memory
//    (As[s][BK][BM], Bs[s][BK][BN]), one __syncthreads per K-step, no register staging.
//    B tails are zero-filled by cp.async src-size (16B chunks when N%4==0 and aligned, 4B otherwise).
//    Each thread computes a TM x TN micro-tile split into 4x4 sub-blocks strided across the tile;
//    warps are 4 (m) x 8 (n) lanes so every float4 shared read is a single wavefront.
//    Grouped rasterization (GROUP rows of tiles) for L2 reuse.
/*@evolve
kernels:
  - name: sgemm_3xtf32_mma
    grid: ["ceil_div(N, TC_BN)", "ceil_div(M, TC_BM)"]
    block: "TC_WM * TC_WN * 32"
    shared: "TC_STAGES * (TC_BM * (TC_BK + 4) + TC_BK * (TC_BN + 8)) * 4"
    args: [a, b, c, M, N, K]
tunables:
  TC_BM: {values: [64, 128, 256], default: 128}
  TC_BN: {values: [64, 128, 256], default: 128}
  TC_BK: {values: [16, 32], default: 32}
  TC_WM: {values: [1, 2, 4], default: 2}
  TC_WN: {values: [1, 2, 4], default: 4}
  TC_STAGES: {values: [2, 3, 4], default: 3}
  TC_MINB: {values: [1, 2], default: 1}
  TC_GROUP: {values: [1, 8], default: 8}
restrictions:
  - TC_BM % (TC_WM * 16) == 0
  - TC_BN % (TC_WN * 8) == 0
  - TC_WM * TC_WN >= 4
  - (TC_BM // (TC_WM * 16)) * (TC_BN // (TC_WN * 8)) >= 4
  - (TC_BM // (TC_WM * 16)) * (TC_BN // (TC_WN * 8)) <= 16
  - TC_STAGES * (TC_BM * (TC_BK + 4) + TC_BK * (TC_BN + 8)) * 4 * TC_MINB <= 225000
  - TC_WM * TC_WN * 32 * TC_MINB * (8 * (TC_BM // (TC_WM * 16)) * (TC_BN // (TC_WN * 8)) + 8 * (TC_BM // (TC_WM * 16)) + 4 * (TC_BN // (TC_WN * 8)) + 32) <= 65536
arch_specific: false
*/

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MINB
#define MINB 2
#endif
#ifndef GROUP
#define GROUP 8
#endif

#define TX (BN / TN)
#define TY (BM / TM)
#define NT (TX * TY)
#define WX (TX / 8)
#define A_V4 (BK * BM / 4)
#define B_V4 (BK * BN / 4)
#define A_IT ((A_V4 + NT - 1) / NT)
#define B_IT ((B_V4 + NT - 1) / NT)
#define A_STAGE (BK * BM)
#define B_STAGE (BK * BN)

// ---------------------------------------------------------------------------------------------
// cp.async helpers (sm_80+)
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async16_zfill(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async4_zfill(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
#define CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;\n" :: "n"(n) : "memory")

// ---------------------------------------------------------------------------------------------
// at[k][m] = a[m][k] for m < M, k < K; zero in the padding (m < Mp, k < Kp).
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256)
transpose_a(const float* __restrict__ a, float* __restrict__ at, int M, int K, int Mp, int Kp) {
    __shared__ float tile[32][33];
    const int m0 = blockIdx.x * 32;
    const int k0 = blockIdx.y * 32;
    const int tx = threadIdx.x;
#pragma unroll
    for (int j = threadIdx.y; j < 32; j += 8) {
        const int m = m0 + j;
        const int k = k0 + tx;
        tile[j][tx] = (m < M && k < K) ? __ldg(a + (size_t)m * K + k) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int j = threadIdx.y; j < 32; j += 8) {
        const int k = k0 + j;
        const int m = m0 + tx;
        if (k < Kp && m < Mp) at[(size_t)k * Mp + m] = tile[tx][j];
    }
}

// ---------------------------------------------------------------------------------------------
// 3xTF32 tensor-core SGEMM with fp32 accuracy (this is the kernel the launch spec runs).
// x = hi + lo: hi = x rounded to tf32 (low 13 bits cleared), lo = x - hi (exact in fp32).
// a*b ~= a_lo*b_hi + a_hi*b_lo + a_hi*b_hi via mma.sync m16n8k8 tf32 with fp32 accumulation;
// the dropped a_lo*b_lo term is ~2^-22 relative. Each K-tile builds up in a fresh register
// tile that is then added into the fp32 accumulator with a plain FADD, so tensor-core
// accumulation rounding never compounds over the whole K.
// Shared: As[s][BM][BK+4] (k contiguous), Bs[s][BK][BN+8] (n contiguous), loaded straight
// from a and b by cp.async (zero-filled tails) in a TC_STAGES ring; with those pads every
// fragment read is conflict-free. Warps are TC_WM x TC_WN, each owning a
// (BM/WM) x (BN/WN) warp tile of 16x8 mma tiles.
// ---------------------------------------------------------------------------------------------
#ifndef TC_BM
#define TC_BM 128
#endif
#ifndef TC_BN
#define TC_BN 128
#endif
#ifndef TC_BK
#define TC_BK 32
#endif
#ifndef TC_WM
#define TC_WM 2
#endif
#ifndef TC_WN
#define TC_WN 4
#endif
#ifndef TC_STAGES
#define TC_STAGES 3
#endif
#ifndef TC_MINB
#define TC_MINB 1
#endif
#ifndef TC_GROUP
#define TC_GROUP 8
#endif

#define TC_NT (TC_WM * TC_WN * 32)
#define TC_WTM (TC_BM / TC_WM)
#define TC_WTN (TC_BN / TC_WN)
#define TC_MT (TC_WTM / 16)
#define TC_NF (TC_WTN / 8)
#define TC_AST (TC_BK + 4)
#define TC_BST (TC_BN + 8)
#define TC_ASTAGE (TC_BM * TC_AST)
#define TC_BSTAGE (TC_BK * TC_BST)
#define TC_ACH (TC_BM * TC_BK / 4)
#define TC_BCH (TC_BK * TC_BN / 4)
#define TC_AIT ((TC_ACH + TC_NT - 1) / TC_NT)
#define TC_BIT ((TC_BCH + TC_NT - 1) / TC_NT)

__device__ __forceinline__ void tc_split(float x, unsigned& hi, unsigned& lo) {
    const unsigned h = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;   // round to tf32
    hi = h;
    lo = __float_as_uint(x - __uint_as_float(h));                      // exact residual
}

__device__ __forceinline__ void tc_mma(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(TC_NT, TC_MINB)
sgemm_3xtf32_mma(const float* __restrict__ a, const float* __restrict__ b,
                 float* __restrict__ c, int M, int N, int K) {
    extern __shared__ __align__(16) float tc_smem[];
    float* As = tc_smem;                              // [STAGES][BM][BK+4]
    float* Bs = tc_smem + TC_STAGES * TC_ASTAGE;      // [STAGES][BK][BN+8]

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t4 = lane & 3;
    const int wm0 = (warp / TC_WN) * TC_WTM;
    const int wn0 = (warp % TC_WN) * TC_WTN;

    // Grouped rasterization: TC_GROUP tile-rows are swept together for L2 reuse.
    const int gx = gridDim.x, gy = gridDim.y;
    const int pid = blockIdx.y * gx + blockIdx.x;
    const int width = TC_GROUP * gx;
    const int gid = pid / width;
    const int firstM = gid * TC_GROUP;
    const int gsize = min(gy - firstM, TC_GROUP);
    const int inGroup = pid - gid * width;
    const int bm = (firstM + inGroup % gsize) * TC_BM;
    const int bn = (inGroup / gsize) * TC_BN;

    const bool vecA = ((K & 3) == 0) && ((reinterpret_cast<unsigned long long>(a) & 15ull) == 0);
    const bool vecB = ((N & 3) == 0) && ((reinterpret_cast<unsigned long long>(b) & 15ull) == 0);
    const bool vecC = ((N & 1) == 0) && ((reinterpret_cast<unsigned long long>(c) & 7ull) == 0);

    auto loadTile = [&](int t, int s) {
        const int k0 = t * TC_BK;
        float* as = As + s * TC_ASTAGE;
        float* bs = Bs + s * TC_BSTAGE;
#pragma unroll
        for (int i = 0; i < TC_AIT; ++i) {
            const int idx = tid + i * TC_NT;
            if ((TC_ACH % TC_NT == 0) || idx < TC_ACH) {
                const int row = idx / (TC_BK / 4);
                const int kc = (idx % (TC_BK / 4)) * 4;
                const int gm = bm + row;
                const int gk = k0 + kc;
                float* dst = as + row * TC_AST + kc;
                if (vecA) {
                    const bool ok = (gm < M) && (gk < K);
                    const float* src = ok ? (a + (size_t)gm * K + gk) : a;
                    cp_async16_zfill(dst, src, ok ? 16 : 0);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const bool ok = (gm < M) && (gk + e < K);
                        const float* src = ok ? (a + (size_t)gm * K + gk + e) : a;
                        cp_async4_zfill(dst + e, src, ok ? 4 : 0);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < TC_BIT; ++i) {
            const int idx = tid + i * TC_NT;
            if ((TC_BCH % TC_NT == 0) || idx < TC_BCH) {
                const int row = idx / (TC_BN / 4);
                const int nc = (idx % (TC_BN / 4)) * 4;
                const int gk = k0 + row;
                const int gn = bn + nc;
                float* dst = bs + row * TC_BST + nc;
                if (vecB) {
                    const bool ok = (gk < K) && (gn < N);
                    const float* src = ok ? (b + (size_t)gk * N + gn) : b;
                    cp_async16_zfill(dst, src, ok ? 16 : 0);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const bool ok = (gk < K) && (gn + e < N);
                        const float* src = ok ? (b + (size_t)gk * N + gn + e) : b;
                        cp_async4_zfill(dst + e, src, ok ? 4 : 0);
                    }
                }
            }
        }
    };

    float acc[TC_MT][TC_NF][4];
#pragma unroll
    for (int i = 0; i < TC_MT; ++i)
#pragma unroll
        for (int j = 0; j < TC_NF; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    const int numTiles = (K + TC_BK - 1) / TC_BK;

    // Prologue: fill STAGES-1 stages (always commit so group counting stays uniform).
#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; ++s) {
        if (s < numTiles) loadTile(s, s);
        cp_async_commit();
    }

    for (int t = 0; t < numTiles; ++t) {
        CP_ASYNC_WAIT(TC_STAGES - 2);   // tile t has landed (for this thread)
        __syncthreads();                // ... for all threads; stage of tile t-1 is free
        {
            const int nt = t + TC_STAGES - 1;
            if (nt < numTiles) loadTile(nt, nt % TC_STAGES);
            cp_async_commit();
        }

        const int st = t % TC_STAGES;
        const float* ap = As + st * TC_ASTAGE + (wm0 + g) * TC_AST + t4;
        const float* bp = Bs + st * TC_BSTAGE + t4 * TC_BST + wn0 + g;

        float part[TC_MT][TC_NF][4];
#pragma unroll
        for (int i = 0; i < TC_MT; ++i)
#pragma unroll
            for (int j = 0; j < TC_NF; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) part[i][j][q] = 0.f;

#pragma unroll
        for (int kk = 0; kk < TC_BK / 8; ++kk) {
            unsigned ahi[TC_MT][4], alo[TC_MT][4];
            unsigned bhi[TC_NF][2], blo[TC_NF][2];
#pragma unroll
            for (int i = 0; i < TC_MT; ++i) {
                const float* p = ap + i * 16 * TC_AST + kk * 8;
                tc_split(p[0], ahi[i][0], alo[i][0]);                   // (g,   t)
                tc_split(p[8 * TC_AST], ahi[i][1], alo[i][1]);          // (g+8, t)
                tc_split(p[4], ahi[i][2], alo[i][2]);                   // (g,   t+4)
                tc_split(p[8 * TC_AST + 4], ahi[i][3], alo[i][3]);      // (g+8, t+4)
            }
#pragma unroll
            for (int j = 0; j < TC_NF; ++j) {
                const float* p = bp + kk * 8 * TC_BST + j * 8;
                tc_split(p[0], bhi[j][0], blo[j][0]);                   // (k=t,   n=g)
                tc_split(p[4 * TC_BST], bhi[j][1], blo[j][1]);          // (k=t+4, n=g)
            }
            // Small terms first; each pass is MT*NF independent mmas.
#pragma unroll
            for (int i = 0; i < TC_MT; ++i)
#pragma unroll
                for (int j = 0; j < TC_NF; ++j)
                    tc_mma(part[i][j], alo[i], bhi[j][0], bhi[j][1]);
#pragma unroll
            for (int i = 0; i < TC_MT; ++i)
#pragma unroll
                for (int j = 0; j < TC_NF; ++j)
                    tc_mma(part[i][j], ahi[i], blo[j][0], blo[j][1]);
#pragma unroll
            for (int i = 0; i < TC_MT; ++i)
#pragma unroll
                for (int j = 0; j < TC_NF; ++j)
                    tc_mma(part[i][j], ahi[i], bhi[j][0], bhi[j][1]);
        }

#pragma unroll
        for (int i = 0; i < TC_MT; ++i)
#pragma unroll
            for (int j = 0; j < TC_NF; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] += part[i][j][q];
    }

    // Epilogue: c fragment (g, 2t..2t+1) and (g+8, 2t..2t+1); float2 where aligned and in range.
#pragma unroll
    for (int i = 0; i < TC_MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = bm + wm0 + i * 16 + h * 8 + g;
            if (r < M) {
                float* cr = c + (size_t)r * N;
#pragma unroll
                for (int j = 0; j < TC_NF; ++j) {
                    const int cc = bn + wn0 + j * 8 + 2 * t4;
                    const float v0 = acc[i][j][2 * h];
                    const float v1 = acc[i][j][2 * h + 1];
                    if (vecC && cc + 1 < N) {
                        *reinterpret_cast<float2*>(cr + cc) = make_float2(v0, v1);
                    } else {
                        if (cc < N)     cr[cc] = v0;
                        if (cc + 1 < N) cr[cc + 1] = v1;
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// c[M][N] = at^T @ b
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(NT, MINB)
sgemm_tiled(const float* __restrict__ at, const float* __restrict__ b,
            float* __restrict__ c, int M, int N, int K, int Mp) {
    extern __shared__ __align__(16) float smem[];
    float* As = smem;                        // [STAGES][BK][BM]
    float* Bs = smem + STAGES * A_STAGE;     // [STAGES][BK][BN]

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int tx = (warp % WX) * 8 + (lane & 7);
    const int ty = (warp / WX) * 4 + (lane >> 3);

    // Grouped rasterization: GROUP tile-rows are swept together for L2 reuse.
    const int gx = gridDim.x, gy = gridDim.y;
    const int pid = blockIdx.y * gx + blockIdx.x;
    const int width = GROUP * gx;
    const int gid = pid / width;
    const int firstM = gid * GROUP;
    const int gsize = min(gy - firstM, GROUP);
    const int inGroup = pid - gid * width;
    const int by = firstM + inGroup % gsize;
    const int bx = inGroup / gsize;
    const int bm = by * BM;
    const int bn = bx * BN;

    const bool vecB = ((N & 3) == 0) && ((reinterpret_cast<unsigned long long>(b) & 15ull) == 0);
    const bool vecC = ((N & 3) == 0) && ((reinterpret_cast<unsigned long long>(c) & 15ull) == 0);

    auto loadTile = [&](int t, int s) {
        const int k0 = t * BK;
        float* as = As + s * A_STAGE;
        float* bs = Bs + s * B_STAGE;
#pragma unroll
        for (int i = 0; i < A_IT; ++i) {
            const int idx = tid + i * NT;
            if ((A_V4 % NT == 0) || idx < A_V4) {
                const int row = idx / (BM / 4);
                const int c4 = (idx % (BM / 4)) * 4;
                cp_async16(as + row * BM + c4, at + (size_t)(k0 + row) * Mp + bm + c4);
            }
        }
#pragma unroll
        for (int i = 0; i < B_IT; ++i) {
            const int idx = tid + i * NT;
            if ((B_V4 % NT == 0) || idx < B_V4) {
                const int row = idx / (BN / 4);
                const int c4 = (idx % (BN / 4)) * 4;
                const int gk = k0 + row;
                const int gn = bn + c4;
                float* dst = bs + row * BN + c4;
                if (vecB) {
                    const bool ok = (gk < K) && (gn < N);
                    const float* src = ok ? (b + (size_t)gk * N + gn) : b;
                    cp_async16_zfill(dst, src, ok ? 16 : 0);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const bool ok = (gk < K) && (gn + e < N);
                        const float* src = ok ? (b + (size_t)gk * N + gn + e) : b;
                        cp_async4_zfill(dst + e, src, ok ? 4 : 0);
                    }
                }
            }
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    const int numTiles = (K + BK - 1) / BK;

    // Prologue: fill STAGES-1 stages (always commit so group counting stays uniform).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < numTiles) loadTile(s, s);
        cp_async_commit();
    }

    int rs = 0;              // stage being read
    int ws = STAGES - 1;     // stage being written
    for (int t = 0; t < numTiles; ++t) {
        CP_ASYNC_WAIT(STAGES - 2);
        __syncthreads();     // tile t visible to all; stage ws (read at t-1) is free

        const int pf = t + STAGES - 1;
        if (pf < numTiles) loadTile(pf, ws);
        cp_async_commit();

        const float* as = As + rs * A_STAGE;
        const float* bs = Bs + rs * B_STAGE;

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float fa[TM], fb[TN];
#pragma unroll
            for (int gi = 0; gi < TM / 4; ++gi) {
                const float4 v = *reinterpret_cast<const float4*>(as + k * BM + gi * 4 * TY + ty * 4);
                fa[gi * 4 + 0] = v.x;
                fa[gi * 4 + 1] = v.y;
                fa[gi * 4 + 2] = v.z;
                fa[gi * 4 + 3] = v.w;
            }
#pragma unroll
            for (int gj = 0; gj < TN / 4; ++gj) {
                const float4 v = *reinterpret_cast<const float4*>(bs + k * BN + gj * 4 * TX + tx * 4);
                fb[gj * 4 + 0] = v.x;
                fb[gj * 4 + 1] = v.y;
                fb[gj * 4 + 2] = v.z;
                fb[gj * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
        }

        rs = (rs + 1 == STAGES) ? 0 : rs + 1;
        ws = (ws + 1 == STAGES) ? 0 : ws + 1;
    }
    CP_ASYNC_WAIT(0);

    // Epilogue: write the micro-tile, float4 where aligned and in range, scalar otherwise.
#pragma unroll
    for (int gi = 0; gi < TM / 4; ++gi) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = bm + gi * 4 * TY + ty * 4 + i;
            if (r < M) {
                float* cr = c + (size_t)r * N;
#pragma unroll
                for (int gj = 0; gj < TN / 4; ++gj) {
                    const int cc = bn + gj * 4 * TX + tx * 4;
                    const float4 v = make_float4(acc[gi * 4 + i][gj * 4 + 0], acc[gi * 4 + i][gj * 4 + 1],
                                                 acc[gi * 4 + i][gj * 4 + 2], acc[gi * 4 + i][gj * 4 + 3]);
                    if (vecC && cc + 3 < N) {
                        *reinterpret_cast<float4*>(cr + cc) = v;
                    } else {
                        if (cc < N)     cr[cc] = v.x;
                        if (cc + 1 < N) cr[cc + 1] = v.y;
                        if (cc + 2 < N) cr[cc + 2] = v.z;
                        if (cc + 3 < N) cr[cc + 3] = v.w;
                    }
                }
            }
        }
    }
}
