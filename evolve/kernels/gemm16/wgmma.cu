// y = x @ w^T in fp16 or bf16 (the task's ELEM and BF16 defines) on Hopper's warpgroup tensor cores:
// wgmma.mma_async m64nBNk16 with fp32 accumulators in registers and both operands read by the tensor
// cores straight from shared memory through matrix descriptors (sm_90a only: arch_specific below).
//
// Why this shape: x [M, K] and w [N, K] are both K-contiguous, which is the "K-major" layout wgmma
// takes for A and B without transposition. A K-slice of 64 halves is one 128-byte row, so a staged
// tile (BM or BN rows x 64) is exactly the canonical K-major 128B-swizzle layout: rows 128 bytes
// apart, 8 rows form a 1024-byte atom, and the 16-byte chunk c of row r sits at chunk c ^ (r % 8) (the
// XOR the hardware applies to address bits 4-6 from bits 7-9, hence 1024-byte aligned tiles). The
// descriptor says: start address >> 4, leading byte offset unused for this layout (1), stride byte
// offset 1024 (from one 8-row group to the next), swizzle mode 1 (128B) in bits 62-63; the 16-wide
// k-steps inside the atom advance the start address by 32 bytes. The swizzle also keeps the cp.async
// stores conflict-free.
//
// A block of WG consumer warpgroups (128 threads each) computes a BM x BN tile of y (tiles ordered in
// groups of GROUP tile-rows so that blocks running together share x and w panels in L2); warpgroup g
// owns rows g*BM/WG .. of it as MI = BM / (64 WG) m64 slabs, each an m64nBN accumulator (BN/2 fp32 per
// thread per slab). There is no TMA and no cluster launch in the harness, so every thread copies with
// cp.async into a STAGES-deep ring: slice kt+STAGES-2 is fetched while slice kt is multiplied and the
// wgmma group of slice kt-1 may still run (wgmma.wait_group 1); one __syncthreads per slice, after
// cp.async.wait_group and fence.proxy.async (cp.async writes through the generic proxy, wgmma reads
// through the async one), both publishes slice kt and proves every warpgroup done with slice kt-2,
// whose buffer is refilled next. Where K % 8 != 0 (rows not 16-byte aligned) the tiles are staged by
// scalar loads into the same layout; outside M, N and K they are zero-filled, so any size is correct.
// The epilogue rounds each fp32 accumulator once and stores pairs straight from the fragment layout
// (warp q of a warpgroup: rows 16q + lane/4 and +8, columns 8j + 2(lane%4) and +1).
// The Hopper seed (hopper.cu, docs/hopper-gemm.md) adds what is not here: TMA loads, a producer
// warpgroup with setmaxnreg and mbarriers, persistent tiles (the next tile's loads overlap this one's
// epilogue), clusters of two with multicast.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
/*@evolve
kernels:
  - name: gemm16_wgmma
    grid: ceil_div(M, BM) * ceil_div(N, BN)
    block: 128 * WG
    shared: STAGES * (BM + BN) * 128 + 1024
    args: [x, w, "y", M, N, K]
arch_specific: true
tunables:
  BM: {values: [64, 128, 256], default: 128}
  BN: {values: [64, 128, 256], default: 256}
  WG: {values: [1, 2], default: 2}
  STAGES: {values: [3, 4, 5, 6], default: 4}
  GROUP: {values: [1, 8, 16], default: 8}
restrictions:
  - BM % (64 * WG) == 0                               # whole m64 slabs per warpgroup
  - (BM // (64 * WG)) * BN <= 256                     # at most 128 fp32 accumulators per thread
  - (BM + BN) // (16 * WG) <= 16                      # 16-byte copies per thread per slice (more spill)
  - STAGES * (BM + BN) * 128 + 1024 <= 232448         # H100/H200 opt-in shared memory
*/
#define NT (128 * WG)          // threads per block
#define MI (BM / (64 * WG))    // m64 slabs per warpgroup
#define NACC (BN / 2)          // fp32 accumulators per thread per slab
#define TILE_X (BM * 128)      // bytes of a staged x slice (BM rows of 64 halves)
#define STAGE_BYTES ((BM + BN) * 128)

#if BF16
#define MMA_T "bf16"
#define PAIR __nv_bfloat162
#define PACK2(a, b) __floats2bfloat162_rn(a, b)
#define FROM_FLOAT(f) __float2bfloat16_rn(f)
#else
#define MMA_T "f16"
#define PAIR __half2
#define PACK2(a, b) __floats2half2_rn(a, b)
#define FROM_FLOAT(f) __float2half_rn(f)
#endif

#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
    "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#if BN == 64
#define WGMMA_ASM \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." MMA_T "." MMA_T " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
    "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
#define WGMMA_ACC ACC8(0), ACC8(8), ACC8(16), ACC8(24)
#elif BN == 128
#define WGMMA_ASM \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." MMA_T "." MMA_T " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
    "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
#define WGMMA_ACC ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
#elif BN == 256
#define WGMMA_ASM \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." MMA_T "." MMA_T " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
    "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
#define WGMMA_ACC ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56), \
    ACC8(64), ACC8(72), ACC8(80), ACC8(88), ACC8(96), ACC8(104), ACC8(112), ACC8(120)
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// Descriptor of a K-major, 128B-swizzled operand starting at shared address `addr` (1024-aligned
// atoms): start >> 4 in bits 0-13, leading byte offset 1 (unused here) in 16-29, stride byte offset
// 1024 >> 4 in 32-45, base offset 0 in 49-51, swizzle mode 1 (128B) in 62-63.
__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

// d += A (64 x 16, K-major, descriptor da) * B (BN x 16, K-major, descriptor db)^T
__device__ __forceinline__ void wgmma(float (&d)[NACC], unsigned long long da, unsigned long long db) {
    asm volatile(WGMMA_ASM : WGMMA_ACC : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
__device__ __forceinline__ void fence_acc(float (&acc)[MI][NACC]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NACC; ++j) asm volatile("" : "+f"(acc[i][j])::"memory");
}

// Stage rows r0 .. r0 + ROWS - 1, columns k0 .. k0 + 63 of a K-contiguous matrix with `rows` rows
// into the 128B-swizzled tile at shared address s; zeros outside it.
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned s, const ELEM* __restrict__ g, int rows, int r0, int k0,
                                          int K, bool vec) {
#pragma unroll
    for (int l = 0; l < ROWS * 8 / NT; ++l) {
        const int idx = threadIdx.x + l * NT, r = idx / 8, c = idx % 8;
        const int gr = r0 + r, gk = k0 + c * 8;
        const unsigned dst = s + r * 128 + ((c ^ (r % 8)) << 4);
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
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v[0]), "r"(v[1]),
                         "r"(v[2]), "r"(v[3])
                         : "memory");
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
gemm16_wgmma(const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y, int M, int N,
             int K) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned smem = (smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned

    // this block's tile, in groups of GROUP tile-rows
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP * tiles_n, pid = blockIdx.x;
    const int first_m = (pid / per_group) * GROUP;
    const int group_m = min(tiles_m - first_m, GROUP);
    const int m0 = (first_m + (pid % per_group) % group_m) * BM;
    const int n0 = ((pid % per_group) / group_m) * BN;

    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const bool vec = K % 8 == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w)) & 15) == 0;
    const int k_tiles = (K + 63) / 64;

    float acc[MI][NACC];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NACC; ++j) acc[i][j] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < k_tiles) {
            load_tile<BM>(smem + s * STAGE_BYTES, x, M, m0, s * 64, K, vec);
            load_tile<BN>(smem + s * STAGE_BYTES + TILE_X, w, N, n0, s * 64, K, vec);
        }
        cp_async_commit();
    }

    // this warpgroup's first slab and the w tile in stage 0, as descriptors; a stage, a slab (64 rows
    // of 128 bytes) and a k-step (16 halves, 32 bytes) are whole multiples of 16 bytes
    const unsigned long long desc_x = descriptor(smem + wg * MI * 64 * 128);
    const unsigned long long desc_w = descriptor(smem + TILE_X);

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 3>();                                 // slice kt has landed ...
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // ... for the async proxy ...
        __syncthreads();  // ... from every thread; every warpgroup is done with slice kt - 2
        const int next = kt + STAGES - 2;
        if (next < k_tiles) {
            const unsigned s = smem + (next % STAGES) * STAGE_BYTES;
            load_tile<BM>(s, x, M, m0, next * 64, K, vec);
            load_tile<BN>(s + TILE_X, w, N, n0, next * 64, K, vec);
        }
        cp_async_commit();

        const unsigned stage = (kt % STAGES) * (STAGE_BYTES >> 4);
        fence_acc(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int i = 0; i < MI; ++i)
                wgmma(acc[i], desc_x + stage + i * (64 * 128 >> 4) + kk * 2, desc_w + stage + kk * 2);
        wgmma_commit();
        wgmma_wait<1>();  // slice kt - 1's group is done: its buffer may be refilled after the barrier
        fence_acc(acc);
    }
    wgmma_wait<0>();
    fence_acc(acc);
    cp_async_wait<0>();

    const bool pairs = N % 2 == 0 && (reinterpret_cast<size_t>(y) & 3) == 0;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        const int row = m0 + (wg * MI + i) * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = n0 + j * 8 + 2 * (lane % 4);
            store_pair(y, row, col, acc[i][4 * j], acc[i][4 * j + 1], M, N, pairs);
            store_pair(y, row + 8, col, acc[i][4 * j + 2], acc[i][4 * j + 3], M, N, pairs);
        }
    }
}
