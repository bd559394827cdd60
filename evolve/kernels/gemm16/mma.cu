// y = x @ w^T in fp16 or bf16 (the task's ELEM and BF16 defines) on tensor cores, Ampere style:
// mma.sync m16n8k16 with fp32 accumulators, operands read from shared memory by ldmatrix, and a
// STAGES-deep cp.async pipeline that copies the next K-slices while the current one is multiplied.
//
// A block computes a BM x BN tile of y (tiles ordered in groups of GROUP tile-rows, so that blocks
// running together share x rows and w rows in L2); each of its (BM/WM) * (BN/WN) warps computes a
// WM x WN tile as (WM/16) x (WN/8) mma tiles. x [M, K] is the row-major A operand and w [N, K] is
// exactly the "col" B operand, so both are staged K-contiguous: a tile row is BK halves, as 16-byte
// chunks, either XOR-swizzled (SWIZZLE=1: chunk ^ row's place in a 128-byte line, so the 8 rows an
// ldmatrix reads land in 8 different bank groups) or padded by 16 bytes (SWIZZLE=0).
// Where K is a multiple of 8 (16-byte rows), a tile is copied by cp.async, zero-filled past M, N
// and K; otherwise by scalar loads (correct at any size, fast only where it matters).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
/*@evolve
kernels:
  - name: gemm16_mma
    grid: ceil_div(M, BM) * ceil_div(N, BN)
    block: 32 * (BM // WM) * (BN // WN)
    shared: STAGES * (BM + BN) * (BK + 8 * (1 - SWIZZLE)) * 2
    args: [x, w, "y", M, N, K]
tunables:
  BM: {values: [64, 128, 256], default: 128}
  BN: {values: [64, 128, 256], default: 128}
  BK: {values: [32, 64], default: 32}
  WM: {values: [32, 64], default: 64}
  WN: {values: [32, 64], default: 64}
  STAGES: {values: [2, 3, 4, 5], default: 4}
  SWIZZLE: {values: [0, 1], default: 1}
  GROUP: {values: [1, 8], default: 8}
restrictions:
  - (BM // WM) * (BN // WN) >= 4                              # 4 to 8 warps
  - (BM // WM) * (BN // WN) <= 8
  - WM * WN >= 2048                                           # 32 x 32 warp tiles starve the tensor cores
  - (BM * BK // 8) % (32 * (BM // WM) * (BN // WN)) == 0      # whole 16-byte copies per thread
  - (BN * BK // 8) % (32 * (BM // WM) * (BN // WN)) == 0
  - STAGES * (BM + BN) * (BK + 8 * (1 - SWIZZLE)) * 2 <= 232448   # H100/H200 opt-in shared memory
*/
#define WARPS_N (BN / WN)
#define NT (32 * (BM / WM) * WARPS_N)  // threads per block
#define MI (WM / 16)                   // mma tiles per warp along M
#define NI (WN / 8)                    // ... along N
#define CH (BK / 8)                    // 16-byte chunks per tile row
#define LD (SWIZZLE ? BK : BK + 8)     // elements per tile row in shared memory
#define TILE_X (BM * LD)
#define STAGE_ELEMS ((BM + BN) * LD)

#if BF16
#define MMA_AB "bf16.bf16"
#define PAIR __nv_bfloat162
#define PACK2(a, b) __floats2bfloat162_rn(a, b)
#define FROM_FLOAT(f) __float2bfloat16_rn(f)
#else
#define MMA_AB "f16.f16"
#define PAIR __half2
#define PACK2(a, b) __floats2half2_rn(a, b)
#define FROM_FLOAT(f) __float2half_rn(f)
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const ELEM* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_AB ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Offset (in elements) of 16-byte chunk c of row r in a staged tile.
__device__ __forceinline__ int tile_offset(int r, int c) {
#if SWIZZLE
    return r * BK + ((c ^ ((r / (8 / CH)) % CH)) << 3);
#else
    return r * LD + (c << 3);
#endif
}

// Stage rows r0 .. r0 + ROWS - 1, columns k0 .. k0 + BK - 1 of a K-contiguous matrix with `rows`
// rows; zeros outside it.
template <int ROWS>
__device__ __forceinline__ void load_tile(ELEM* s, const ELEM* __restrict__ g, int rows, int r0, int k0,
                                          int K, bool vec) {
#pragma unroll
    for (int l = 0; l < ROWS * CH / NT; ++l) {
        const int idx = threadIdx.x + l * NT, r = idx / CH, c = idx % CH;
        const int gr = r0 + r, gk = k0 + (c << 3);
        ELEM* dst = s + tile_offset(r, c);
        if (vec) {  // K % 8 == 0: a chunk is wholly inside or wholly outside
            const bool in = gr < rows && gk < K;
            cp_async16(dst, in ? g + (size_t)gr * K + gk : g, in ? 16 : 0);
        } else {
            const unsigned short* bits = reinterpret_cast<const unsigned short*>(g) + (size_t)gr * K;
            unsigned v[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int k = gk + 2 * e;
                const unsigned lo = gr < rows && k < K ? bits[k] : 0u;
                const unsigned hi = gr < rows && k + 1 < K ? bits[k + 1] : 0u;
                v[e] = lo | (hi << 16);
            }
            *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}

__device__ __forceinline__ void store_pair(ELEM* __restrict__ y, int row, int col, float a, float b,
                                           int M, int N, bool pairs) {
    if (row >= M) return;
    ELEM* p = y + (size_t)row * N + col;
    if (pairs && col + 1 < N) {
        *reinterpret_cast<PAIR*>(p) = PACK2(a, b);
    } else {
        if (col < N) p[0] = FROM_FLOAT(a);
        if (col + 1 < N) p[1] = FROM_FLOAT(b);
    }
}

extern "C" __global__ void __launch_bounds__(NT, 1)
gemm16_mma(const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y, int M, int N,
           int K) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    ELEM* smem = reinterpret_cast<ELEM*>(smem_raw);

    // this block's tile, in groups of GROUP tile-rows
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP * tiles_n, pid = blockIdx.x;
    const int first_m = (pid / per_group) * GROUP;
    const int group_m = min(tiles_m - first_m, GROUP);
    const int m0 = (first_m + (pid % per_group) % group_m) * BM;
    const int n0 = ((pid % per_group) / group_m) * BN;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    const bool vec = K % 8 == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w)) & 15) == 0;
    const int k_tiles = (K + BK - 1) / BK;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) {
            load_tile<BM>(smem + s * STAGE_ELEMS, x, M, m0, s * BK, K, vec);
            load_tile<BN>(smem + s * STAGE_ELEMS + TILE_X, w, N, n0, s * BK, K, vec);
        }
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // slice kt has landed ...
        __syncthreads();              // ... for every thread, and slice kt - 1 is no longer read
        const int next = kt + STAGES - 1;
        if (next < k_tiles) {
            ELEM* s = smem + (next % STAGES) * STAGE_ELEMS;
            load_tile<BM>(s, x, M, m0, next * BK, K, vec);
            load_tile<BN>(s + TILE_X, w, N, n0, next * BK, K, vec);
        }
        cp_async_commit();

        const ELEM* xs = smem + (kt % STAGES) * STAGE_ELEMS;
        const ELEM* ws = xs + TILE_X;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned a[MI][4], b[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i)  // rows 0-15 at k-chunks 2kk (lanes 0-15) and 2kk+1 (16-31)
                ldmatrix_x4(a[i], xs + tile_offset(wm + i * 16 + lane % 16, 2 * kk + lane / 16));
#pragma unroll
            for (int j = 0; j < NI; j += 2) {  // two n8 tiles: (n 0-7 | 8-15) x (k-chunk 2kk | 2kk+1)
                unsigned t[4];
                ldmatrix_x4(t, ws + tile_offset(wn + j * 8 + (lane / 16) * 8 + lane % 8,
                                                2 * kk + (lane / 8) % 2));
                b[j][0] = t[0];
                b[j][1] = t[1];
                b[j + 1][0] = t[2];
                b[j + 1][1] = t[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma16816(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    cp_async_wait<0>();

    const bool pairs = N % 2 == 0 && (reinterpret_cast<size_t>(y) & 3) == 0;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        const int row = m0 + wm + i * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = n0 + wn + j * 8 + 2 * (lane % 4);
            store_pair(y, row, col, acc[i][j][0], acc[i][j][1], M, N, pairs);
            store_pair(y, row + 8, col, acc[i][j][2], acc[i][j][3], M, N, pairs);
        }
    }
}
