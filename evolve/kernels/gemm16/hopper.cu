// y = x @ w^T in fp16 or bf16 (the task's ELEM and BF16 defines), the Hopper way: TMA copies tiles
// into 128-byte-swizzled shared memory, wgmma.mma_async multiplies them straight from there into fp32
// registers, a producer warp and two consumer warpgroups hand stages to each other through mbarriers,
// and persistent blocks walk the tiles (sm_90a only: arch_specific below).
//
// Why this shape (CUTLASS's sm90 "warp-specialized persistent cooperative" design, written for this
// harness): the wgmma seed spends half the tensor pipe's time waiting because its consumer threads issue
// every copy and its address arithmetic. Here the harness encodes a TMA tensor map over x and one over w
// (tensor_maps below), so one thread of a producer warpgroup moves a whole stage with two or three
// instructions, and the consumers issue nothing but wgmma, barrier waits and the epilogue. The producer
// gives registers back (setmaxnreg.dec 40) so the consumers can hold 128 fp32 accumulators each
// (setmaxnreg.inc 232).
//
// Layout: x [M, K] and w [N, K] are both K-contiguous, the "K-major" layout wgmma takes for A and B. A
// stage is a BM x 64 box of x and a BN x 64 box of w, 64 halves (128 bytes) per row in TMA's 128-byte
// swizzle, which is the canonical K-major SW128 layout wgmma's matrix descriptors describe (8 rows form
// a 1024-byte atom; stride byte offset 1024; a 16-wide k-step inside the atom is +32 bytes). TMA
// zero-fills what lies past M, N or K, so ragged sizes need no other path.
//
// Pipeline: STAGES-deep ring. Stage s has a "full" mbarrier (the producer's arrive.expect_tx of the
// stage's bytes; TMA completes it) and an "empty" one (one arrival per consumer warp once the wgmma
// group that read the stage has retired; wgmma.wait_group 1 keeps one group in flight). A running
// slice counter gives every stage's phase to producer and consumers alike across tiles, so the
// producer fetches the next tile's slices while the consumers store the last one's results.
//
// Tiles: a block computes BM x BN tiles of y, two consumer warpgroups of BM/2 rows each (m64 slabs);
// grid = min(tiles, SMS), the GPU's multiprocessor count, and each block takes every gridDim-th tile in
// an order grouped GROUP tile-rows at a time (so blocks running together share x and w panels in L2).
// With CM = 2 the blocks run in clusters of two that take vertically adjacent tiles (the same w
// columns): each block's producer fetches half of the w box and multicasts it into both blocks, so w
// crosses L2 once per pair, and a stage is free only when both blocks' consumers released it.
//
// K % 8 != 0: rows are not 16-byte multiples, which TMA cannot describe, so the harness passes zero
// maps (`when` below) and the kernel computes y by plain dot products: correct, and never timed.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
/*@evolve
tensor_maps:
  - {name: x_map, buffer: x, box: [64, BM], swizzle: 128, when: "K % 8 == 0"}
  - {name: w_map, buffer: w, box: [64, BN // CM], swizzle: 128, when: "K % 8 == 0"}
kernels:
  - name: gemm16_hopper
    grid: CM * min(ceil_div(M, BM * CM) * ceil_div(N, BN), SMS // CM)   # persistent
    block: 384
    shared: STAGES * (BM + BN) * 128 + 1024
    cluster: [CM, 1, 1]
    args: [x_map, w_map, x, w, "y", M, N, K]
arch_specific: true
tunables:
  BM: {values: [128, 256], default: 128}
  BN: {values: [128, 192, 256], default: 256}
  STAGES: {values: [3, 4, 5, 6], default: 4}
  GROUP: {values: [1, 4, 8, 16], default: 8}
  CM: {values: [1, 2], default: 2}
restrictions:
  - (BM // 128) * BN <= 256                           # at most 128 fp32 accumulators per thread
  - STAGES * (BM + BN) * 128 + 1024 <= 232448         # H100/H200 opt-in shared memory
*/
#define MI (BM / 128)          // m64 slabs per consumer warpgroup
#define NACC (BN / 2)          // fp32 accumulators per thread per slab
#define TILE_X (BM * 128)      // bytes of a staged x slice (BM rows of 64 halves)
#define W_PART (BN / CM)       // rows of w each block of a cluster fetches
#define STAGE_BYTES ((BM + BN) * 128)
#define CONSUMER_WARPS 8

#if BF16
#define MMA_T "bf16"
#define PAIR __nv_bfloat162
#define PACK2(a, b) __floats2bfloat162_rn(a, b)
#define FROM_FLOAT(f) __float2bfloat16_rn(f)
#define TO_FLOAT(v) __bfloat162float(v)
#else
#define MMA_T "f16"
#define PAIR __half2
#define PACK2(a, b) __floats2half2_rn(a, b)
#define FROM_FLOAT(f) __float2half_rn(f)
#define TO_FLOAT(v) __half2float(v)
#endif

#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
    "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#if BN == 128
#define WGMMA_ASM \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." MMA_T "." MMA_T " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
    "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
#define WGMMA_ACC ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
#elif BN == 192
#define WGMMA_ASM \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n192k16.f32." MMA_T "." MMA_T " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95" \
    "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
#define WGMMA_ACC ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56), \
    ACC8(64), ACC8(72), ACC8(80), ACC8(88)
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

struct alignas(64) TensorMap { unsigned long long bits[16]; };  // CUtensorMap, without the header

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}

// one arrival on the barrier at the same shared address in block `rank` of the cluster (this one
// too). Release at the block's scope, as CUTLASS does: what the arrival hands back is a stage the
// tensor cores have finished reading (wgmma.wait_group), and the `.release.cluster` form costs a
// cluster-wide memory fence per arrival (Nsight Compute: `membar` was the top stall, 0.34 ms).
__device__ __forceinline__ void bar_arrive_cluster(unsigned bar, unsigned rank) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 ::"r"(bar), "r"(rank) : "memory");
}

__device__ __forceinline__ void bar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// a consumer warp hands a stage back to the producer of every block that writes into it
__device__ __forceinline__ void release(unsigned empty_bar) {
#if CM > 1
    for (unsigned r = 0; r < CM; ++r) bar_arrive_cluster(empty_bar, r);
#else
    bar_arrive(empty_bar);
#endif
}

__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// the box at (k, row) of `map` into shared memory at dst, completing `bytes` on bar
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap* map, int k, int row, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(map), "r"(k), "r"(row), "r"(bar) : "memory");
}

// the same, written at dst (and completing on bar) in every block of the cluster named by mask
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const TensorMap* map, int k, int row,
                                                   unsigned bar, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 ::"r"(dst), "l"(map), "r"(k), "r"(row), "r"(bar), "h"(mask) : "memory");
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
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

// Tile t of the grouped order -> its first row and column (rows count in cluster-tall tiles).
__device__ __forceinline__ void tile_origin(int t, int tiles_m, int tiles_n, int& m0, int& n0) {
    const int per_group = GROUP * tiles_n;
    const int first_m = (t / per_group) * GROUP;
    const int group_m = min(tiles_m - first_m, GROUP);
    m0 = (first_m + (t % per_group) % group_m) * (BM * CM);
    n0 = ((t % per_group) / group_m) * BN;
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

// K % 8 != 0 (no tensor maps): one warp per element of y, fp32 sums.
__device__ void dot_products(const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y,
                             int M, int N, int K) {
    const int lane = threadIdx.x % 32, warps = gridDim.x * (blockDim.x / 32);
    for (long long e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; e < (long long)M * N; e += warps) {
        const ELEM* xr = x + (e / N) * K;
        const ELEM* wr = w + (e % N) * K;
        float s = 0.f;
        for (int k = lane; k < K; k += 32) s += TO_FLOAT(xr[k]) * TO_FLOAT(wr[k]);
#pragma unroll
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[e] = FROM_FLOAT(s);
    }
}

extern "C" __global__ void __launch_bounds__(384, 1)
gemm16_hopper(const __grid_constant__ TensorMap x_map, const __grid_constant__ TensorMap w_map,
              const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y, int M, int N, int K) {
    if (K % 8 != 0) {
        dot_products(x, w, y, M, N, K);
        return;
    }
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const unsigned smem = (smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
    unsigned rank = 0;
#if CM > 1
    asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(smem_addr(&full[s]), 1);
            bar_init(smem_addr(&empty[s]), CONSUMER_WARPS * CM);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
#if CM > 1
    cluster_sync();  // no block multicasts into, or arrives on, a barrier not yet made
#else
    __syncthreads();
#endif

    const int tiles_m = (M + BM * CM - 1) / (BM * CM), tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n, k_tiles = (K + 63) / 64;
    const int stride = gridDim.x / CM;
    const int wg = threadIdx.x / 128;

    if (wg == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(&x_map) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(&w_map) : "memory");
            unsigned it = 0;
            for (int t = blockIdx.x / CM; t < tiles; t += stride) {
                int m0, n0;
                tile_origin(t, tiles_m, tiles_n, m0, n0);
                for (int kt = 0; kt < k_tiles; ++kt, ++it) {
                    const unsigned s = it % STAGES, stage = smem + s * STAGE_BYTES;
                    bar_wait(smem_addr(&empty[s]), ((it / STAGES) & 1) ^ 1);
                    const unsigned bar = smem_addr(&full[s]);
                    bar_expect(bar, STAGE_BYTES);
                    tma_load(stage, &x_map, kt * 64, m0 + rank * BM, bar);
#if CM > 1
                    tma_load_multicast(stage + TILE_X + rank * W_PART * 128, &w_map, kt * 64, n0 + rank * W_PART,
                                       bar, (unsigned short)((1u << CM) - 1));
#else
                    tma_load(stage + TILE_X, &w_map, kt * 64, n0, bar);
#endif
                }
            }
        }
    } else {  // consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        const bool pairs = N % 2 == 0 && (reinterpret_cast<size_t>(y) & 3) == 0;
        // this warpgroup's first slab and the w tile in stage 0, as descriptors; a stage, a slab (64 rows
        // of 128 bytes) and a k-step (16 halves, 32 bytes) are whole multiples of 16 bytes
        const unsigned long long desc_x = descriptor(smem + c * MI * 64 * 128);
        const unsigned long long desc_w = descriptor(smem + TILE_X);
        float acc[MI][NACC];
        unsigned it = 0;
        for (int t = blockIdx.x / CM; t < tiles; t += stride) {
            int m0, n0;
            tile_origin(t, tiles_m, tiles_n, m0, n0);
            m0 += rank * BM;
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NACC; ++j) acc[i][j] = 0.f;
            for (int kt = 0; kt < k_tiles; ++kt, ++it) {
                const unsigned s = it % STAGES;
                bar_wait(smem_addr(&full[s]), (it / STAGES) & 1);
                const unsigned stage = s * (STAGE_BYTES >> 4);
                fence_acc(acc);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < 4; ++kk)
#pragma unroll
                    for (int i = 0; i < MI; ++i)
                        wgmma(acc[i], desc_x + stage + i * (64 * 128 >> 4) + kk * 2, desc_w + stage + kk * 2);
                wgmma_commit();
                wgmma_wait<1>();  // the previous slice's group has retired: hand its stage back
                fence_acc(acc);
                if (kt > 0 && lane == 0) release(smem_addr(&empty[(it + STAGES - 1) % STAGES]));
            }
            wgmma_wait<0>();
            fence_acc(acc);
            if (k_tiles > 0 && lane == 0) release(smem_addr(&empty[(it + STAGES - 1) % STAGES]));
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int row = m0 + (c * MI + i) * 64 + warp * 16 + lane / 4;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    const int col = n0 + j * 8 + 2 * (lane % 4);
                    store_pair(y, row, col, acc[i][4 * j], acc[i][4 * j + 1], M, N, pairs);
                    store_pair(y, row + 8, col, acc[i][4 * j + 2], acc[i][4 * j + 3], M, N, pairs);
                }
            }
        }
    }
#if CM > 1
    cluster_sync();  // no block leaves while the other may still arrive on its barriers
#endif
}
