// cuda-evolve: best kernel of run rm-hgemm, task hgemm, on NVIDIA H200.
// 0.2628 ms: 522.9 TFLOP/s = 52.9% of the 989.0 TFLOP/s fp16_tensor datasheet peak (383 GB/s; 52.9% of the roofline).
// Tunables and the task's defines are baked in as #defines below: it compiles on its own.
// best.py beside it launches it on CuPy arrays or PyTorch tensors.
// Launch at M=4096,N=4096,K=4096:
//   hgemm_wgmma<<<(512, 1, 1), (512, 1, 1), 197632>>>(x, w, y, 4096, 4096, 4096)
// Launch at M=8192,N=14336,K=4096:
//   hgemm_wgmma<<<(3584, 1, 1), (512, 1, 1), 197632>>>(x, w, y, 8192, 14336, 4096)
// Launch at M=8192,N=4096,K=14336:
//   hgemm_wgmma<<<(1024, 1, 1), (512, 1, 1), 197632>>>(x, w, y, 8192, 4096, 14336)
#define BM 256
#define BN 128
#define GROUP_M 8
#define STAGES 4
#define ELEM __half
#define BF16 0
// y = x @ w^T, fp16 (or bf16) in, fp32 accumulation on Hopper tensor cores (wgmma.mma_async), y rounded once.
// Block tile BM x BN; BM/64 warpgroups, each owning 64 rows x BN columns (BN/2 fp32 accumulators per thread).
// K is walked in slices of 64 halves (128 bytes per row) through a STAGES-deep cp.async ring in dynamic
// shared memory. Tiles are stored K-major in the 128B-swizzle layout (16-byte chunk c of row r lives at
// chunk c ^ (r & 7), 1024-byte aligned atoms), so wgmma reads both operands directly via smem descriptors.
// Fast path (K % 8 == 0, 16B-aligned pointers): 16-byte cp.async with zero-fill outside the matrices.
// Otherwise each 8-element chunk is gathered with scalar bounds-checked loads, so any M, N, K works.
// Pipeline: prefetch distance STAGES-2; one wgmma batch is kept in flight (wait_group 1) while the next
// slice is issued, so the slot being overwritten is always two slices old.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
/*@evolve
kernels:
  - name: hgemm_wgmma
    grid: "ceil_div(M, BM) * ceil_div(N, BN)"
    block: (BM // 64) * 128
    shared: (BM + BN) * 128 * STAGES + 1024
    args: [x, w, y, M, N, K]
tunables:
  BM: {values: [64, 128, 256], default: 128}
  BN: {values: [128, 256], default: 256}
  STAGES: {values: [3, 4, 5, 6], default: 4}
  GROUP_M: {values: [1, 8, 16], default: 8}
restrictions:
  - BM * BN <= 32768
  - (BM + BN) * 128 * STAGES + 1024 <= 232448
arch_specific: true
*/

#ifndef ELEM
#define ELEM __half
#endif
#ifndef BF16
#define BF16 0
#endif

#define BK 64                          // K slice in elements (128 bytes per row = one swizzle row)
#define ROWB 128                       // bytes per tile row
#define NWG (BM / 64)                  // warpgroups per block
#define NT (NWG * 128)                 // threads per block
#define A_STAGE_BYTES (BM * ROWB)
#define B_STAGE_BYTES (BN * ROWB)
#define NACC (BN / 2)                  // fp32 accumulators per thread (64 x BN over 128 threads)

#if BF16
#define FROM_FLOAT(f) __float2bfloat16_rn(f)
#define ELEM2 __nv_bfloat162
#define PACK2(a, b) __floats2bfloat162_rn(a, b)
#define MMA_TYPE "bf16"
#else
#define FROM_FLOAT(f) __float2half_rn(f)
#define ELEM2 __half2
#define PACK2(a, b) __floats2half2_rn(a, b)
#define MMA_TYPE "f16"
#endif

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N_>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N_) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N_>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N_) : "memory");
}
__device__ __forceinline__ void fence_acc(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Shared-memory matrix descriptor: K-major, 128B swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ unsigned long long make_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4)
         | (1ull << 16)          // leading byte offset (unused for swizzled K-major), 16 B
         | (64ull << 32)         // stride byte offset: 1024 B >> 4
         | (1ull << 62);         // SWIZZLE_128B
}

#define R8(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
              "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])

// One 64 x BN x 16 wgmma: d += A(64x16, smem desc) * B(BNx16, smem desc)^T
__device__ __forceinline__ void wgmma_tile(float* d, unsigned long long da, unsigned long long db) {
    const int scale_d = 1;
#if BN == 256
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." MMA_TYPE "." MMA_TYPE " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56),
          R8(64), R8(72), R8(80), R8(88), R8(96), R8(104), R8(112), R8(120)
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
#else
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." MMA_TYPE "." MMA_TYPE " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n"
        "}\n"
        : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56)
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
#endif
}

// Load a ROWS x BK slice of src[rows_total, K] (rows from r0, k from k0) into a 128B-swizzled tile.
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned char* tile, unsigned tile_s, const ELEM* __restrict__ src,
                                          int r0, int rows_total, int k0, int K, bool vec, int tid) {
    const unsigned short* s16 = reinterpret_cast<const unsigned short*>(src);
#pragma unroll
    for (int l = 0; l < ROWS * 8 / NT; ++l) {
        const int idx = tid + l * NT;
        const int r = idx >> 3, c = idx & 7;
        const int off = r * ROWB + ((c ^ (r & 7)) << 4);
        const int gr = r0 + r, gk = k0 + c * 8;
        if (vec) {
            const bool ok = (gr < rows_total) && (gk < K);   // K % 8 == 0: chunk fully in or out
            const ELEM* p = ok ? (src + (size_t)gr * K + gk) : src;
            cp_async16(tile_s + off, p, ok ? 16 : 0);
        } else {
            unsigned p[4];
            const bool rok = gr < rows_total;
            const size_t base = (size_t)(rok ? gr : 0) * K;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int k_lo = gk + 2 * q, k_hi = k_lo + 1;
                const unsigned lo = (rok && k_lo < K) ? (unsigned)s16[base + k_lo] : 0u;
                const unsigned hi = (rok && k_hi < K) ? (unsigned)s16[base + k_hi] : 0u;
                p[q] = lo | (hi << 16);
            }
            *reinterpret_cast<uint4*>(tile + off) = make_uint4(p[0], p[1], p[2], p[3]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT, 1)
hgemm_wgmma(const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y,
            int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // 1024-byte align the ring (swizzle atoms must be 1024-aligned); 1024 spare bytes are requested.
    const unsigned raw_s = smem_u32(smem_raw);
    const unsigned pad = ((raw_s + 1023u) & ~1023u) - raw_s;
    unsigned char* sA = smem_raw + pad;                       // STAGES x [BM][128 B]
    unsigned char* sB = sA + STAGES * A_STAGE_BYTES;          // STAGES x [BN][128 B]
    const unsigned sA_s = raw_s + pad;
    const unsigned sB_s = sA_s + STAGES * A_STAGE_BYTES;

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int wg = warp >> 2;

    // Grouped rasterization: GROUP_M block-rows sweep N together for L2 reuse.
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * grid_n;
    const int group = pid / per_group;
    const int first_m = group * GROUP_M;
    const int gsz = min(grid_m - first_m, GROUP_M);
    const int local = pid - group * per_group;
    const int pid_m = first_m + local % gsz;
    const int pid_n = local / gsz;
    const int m0 = pid_m * BM, n0 = pid_n * BN;

    const bool vec = ((K & 7) == 0) &&
                     ((((unsigned long long)x) | ((unsigned long long)w)) & 15ull) == 0ull;

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;

    const int KT = (K + BK - 1) / BK;

    // Prologue: STAGES-2 slices in flight (always commit so group counting stays uniform).
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < KT) {
            load_tile<BM>(sA + s * A_STAGE_BYTES, sA_s + s * A_STAGE_BYTES, x, m0, M, s * BK, K, vec, tid);
            load_tile<BN>(sB + s * B_STAGE_BYTES, sB_s + s * B_STAGE_BYTES, w, n0, N, s * BK, K, vec, tid);
        }
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 3>();   // slice kt has landed (for this thread)
        fence_proxy_async();           // make generic-proxy smem writes visible to wgmma (async proxy)
        __syncthreads();               // ... for all threads; and every warpgroup finished slice kt-2

        const int nk = kt + STAGES - 2;   // goes into the slot of slice kt-2, no longer read by anyone
        if (nk < KT) {
            const int ns = nk % STAGES;
            load_tile<BM>(sA + ns * A_STAGE_BYTES, sA_s + ns * A_STAGE_BYTES, x, m0, M, nk * BK, K, vec, tid);
            load_tile<BN>(sB + ns * B_STAGE_BYTES, sB_s + ns * B_STAGE_BYTES, w, n0, N, nk * BK, K, vec, tid);
        }
        cp_async_commit();

        const int st = kt % STAGES;
        const unsigned long long da = make_desc(sA_s + st * A_STAGE_BYTES + wg * (64 * ROWB));
        const unsigned long long db = make_desc(sB_s + st * B_STAGE_BYTES);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)   // +32 bytes per k16 step (>>4 = 2) inside the swizzled row
            wgmma_tile(acc, da + (unsigned long long)(kk * 2), db + (unsigned long long)(kk * 2));
        wgmma_commit();
        wgmma_wait<1>();   // keep one batch in flight; slice kt-1 is done
    }
    wgmma_wait<0>();
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < NACC; ++i) fence_acc(acc[i]);

    // Epilogue: acc[4j + {0,1}] at (row, 8j + 2t + {0,1}), acc[4j + {2,3}] at row + 8.
    const int wrow = m0 + wg * 64 + (warp & 3) * 16 + (lane >> 2);
    const int tc = (lane & 3) * 2;
    const bool vecN = ((N & 1) == 0) && ((((unsigned long long)y) & 3ull) == 0ull);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + j * 8 + tc;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gm = wrow + h * 8;
            if (gm < M) {
                const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                const size_t o = (size_t)gm * N + col;
                if (vecN && col + 1 < N) {
                    *reinterpret_cast<ELEM2*>(y + o) = PACK2(v0, v1);
                } else {
                    if (col < N) y[o] = FROM_FLOAT(v0);
                    if (col + 1 < N) y[o + 1] = FROM_FLOAT(v1);
                }
            }
        }
    }
}
