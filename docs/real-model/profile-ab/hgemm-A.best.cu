// cuda-evolve: best kernel of run rm-hgemm, task hgemm, on NVIDIA H200.
// 0.2038 ms: 674.5 TFLOP/s = 68.2% of the 989.0 TFLOP/s fp16_tensor datasheet peak (494 GB/s; 68.2% of the roofline).
// Tunables and the task's defines are baked in as #defines below: it compiles on its own.
// best.py beside it launches it on CuPy arrays or PyTorch tensors.
// Launch at M=4096,N=4096,K=4096:
//   hgemm_tma_ws<<<(132, 1, 1), (384, 1, 1), 197632>>>(x, w, y, 4096, 4096, 4096)
// Launch at M=8192,N=14336,K=4096:
//   hgemm_tma_ws<<<(132, 1, 1), (384, 1, 1), 197632>>>(x, w, y, 8192, 14336, 4096)
// Launch at M=8192,N=4096,K=14336:
//   hgemm_tma_ws<<<(132, 1, 1), (384, 1, 1), 197632>>>(x, w, y, 8192, 4096, 14336)
#define HX_GM 4
#define HX_ST 4
#define ELEM __half
#define BF16 0
/*@evolve
kernels:
  - name: hgemm_tma_ws
    grid: "min(ceil_div(M, 128) * ceil_div(N, 256), 132)"
    block: 384
    shared: HX_ST * 49152 + 1024
    args: [x, w, y, M, N, K]
tunables:
  HX_ST: {values: [3, 4], default: 4}
  HX_GM: {values: [1, 4, 8, 16], default: 8}
restrictions:
  - HX_ST * 49152 + 1024 <= 231424
arch_specific: true
*/
// hgemm_tma_ws: persistent, warp-specialized Hopper GEMM. y = x @ w^T, fp32 accumulation, rounded once.
// Block = 3 warpgroups: WG0/WG1 are consumers (each owns 64 rows of a 128x256 output tile and issues
// wgmma.m64n256k16 from shared memory), WG2 is the producer (one thread issues TMA tile loads).
// K is walked in 64-wide slices through an HX_ST-deep ring of {A 128x64, B 256x64} stages (48 KB each),
// written by TMA in the 128B-swizzle layout the wgmma descriptors expect. Each stage has a "full"
// mbarrier (producer arrive.expect_tx + TMA complete_tx) and an "empty" mbarrier (one arrival per
// consumer warpgroup once its wgmma reading the stage has retired). Tiles are statically strided over
// the persistent grid, so the producer prefetches the next tile while consumers run the epilogue.
// The two tensor maps (x, w) are built on the device each call (zero-filled 128-byte object +
// tensormap.replace, then copied to a per-block global slot with a release fence and acquired by the
// producer). TMA zero-fills out-of-range rows / k. When K % 8 != 0 or x / w are not 16-byte aligned
// (TMA cannot describe them), a plain warp-per-output dot-product path computes y exactly in fp32.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef HX_ST
#define HX_ST 4
#endif
#ifndef HX_GM
#define HX_GM 8
#endif
// The previous kernel (hgemm_wgmma, further below) is no longer launched but still compiled:
// give its former tunables fixed values.
#ifndef WGS
#define WGS 2
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 1
#endif

#if BF16
#define HX_MMA_T "bf16"
#else
#define HX_MMA_T "f16"
#endif

// one 256-byte slot (two 128-byte tensor maps) per persistent block (grid <= 132); rewritten every call
__device__ __align__(128) unsigned char hx_tmap_store[132 * 256];

__device__ __forceinline__ unsigned hx_smem(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ float hx_f(ELEM v) {
#if BF16
    return __bfloat162float(v);
#else
    return __half2float(v);
#endif
}
__device__ __forceinline__ ELEM hx_cvt(float v) {
#if BF16
    return __float2bfloat16_rn(v);
#else
    return __float2half_rn(v);
#endif
}
__device__ __forceinline__ unsigned hx_pack2(float a, float b) {
#if BF16
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
#else
    __half2 v = __floats2half2_rn(a, b);
#endif
    return *reinterpret_cast<unsigned*>(&v);
}

// ---- mbarrier ----
__device__ __forceinline__ void hx_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void hx_mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void hx_mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ bool hx_mbar_try(unsigned bar, unsigned parity) {
    unsigned ok;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    return ok != 0u;
}
__device__ __forceinline__ void hx_mbar_wait(unsigned bar, unsigned parity) {
    while (!hx_mbar_try(bar, parity)) {}
}

// ---- TMA ----
__device__ __forceinline__ void hx_tma_load(unsigned dst, const void* tmap, unsigned bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(tmap)), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
// Fill a zeroed 128-byte tensor map in shared memory: 2-D, [outer][inner] u16 elements, row stride
// inner*2 bytes, box 64 (inner) x box_outer, 128-byte swizzle, zero fill out of bounds.
__device__ __forceinline__ void hx_tmap_fill(unsigned s32, const void* gaddr, int inner, int outer,
                                             int box_outer) {
    const unsigned long long s = s32;
#if (__CUDACC_VER_MAJOR__ > 12) || ((__CUDACC_VER_MAJOR__ == 12) && (__CUDACC_VER_MINOR__ > 3))
    const unsigned long long gstride = (unsigned long long)inner * 2ull;
#else
    const unsigned long long gstride = ((unsigned long long)inner * 2ull) >> 4;  // 4 LSBs not included
#endif
    const unsigned box_in = 64u, ones = 1u;
    asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
                 :: "l"(s), "l"(reinterpret_cast<unsigned long long>(gaddr)) : "memory");
    asm volatile("tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 1;\n" :: "l"(s) : "memory");
    asm volatile("tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 0, %1;\n"
                 :: "l"(s), "r"(box_in) : "memory");
    asm volatile("tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 1, %1;\n"
                 :: "l"(s), "r"((unsigned)box_outer) : "memory");
    asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %1;\n"
                 :: "l"(s), "r"((unsigned)inner) : "memory");
    asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %1;\n"
                 :: "l"(s), "r"((unsigned)outer) : "memory");
    asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %1;\n"
                 :: "l"(s), "l"(gstride) : "memory");
    asm volatile("tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 0, %1;\n"
                 :: "l"(s), "r"(ones) : "memory");
    asm volatile("tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 1, %1;\n"
                 :: "l"(s), "r"(ones) : "memory");
    asm volatile("tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%0], 1;\n" :: "l"(s) : "memory");
    asm volatile("tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [%0], 0;\n" :: "l"(s) : "memory");
    asm volatile("tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%0], 3;\n" :: "l"(s) : "memory");
    asm volatile("tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [%0], 0;\n" :: "l"(s) : "memory");
}
__device__ __forceinline__ void hx_tmap_publish(const void* gdst, unsigned ssrc) {  // whole warp
    asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned"
                 " [%0], [%1], 128;\n"
                 :: "l"(reinterpret_cast<unsigned long long>(gdst)), "r"(ssrc) : "memory");
}
__device__ __forceinline__ void hx_tmap_acquire(const void* g) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n"
                 :: "l"(reinterpret_cast<unsigned long long>(g)) : "memory");
}

// ---- wgmma ----
__device__ __forceinline__ void hx_wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void hx_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int P>
__device__ __forceinline__ void hx_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(P) : "memory");
}
__device__ __forceinline__ void hx_fence_acc(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
// K-major, 128-byte swizzle, 8-row groups 1024 bytes apart
__device__ __forceinline__ unsigned long long hx_desc(unsigned saddr) {
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4)
         | (1ull << 16)
         | ((unsigned long long)(1024 >> 4) << 32)
         | (1ull << 62);
}

#define HX_F8(b) "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), \
                 "+f"(d[(b) + 4]), "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7])

__device__ __forceinline__ void hx_wgmma_m64n256k16(float (&d)[128], unsigned long long da,
                                                    unsigned long long db) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." HX_MMA_T "." HX_MMA_T " "
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
        : HX_F8(0), HX_F8(8), HX_F8(16), HX_F8(24), HX_F8(32), HX_F8(40), HX_F8(48), HX_F8(56),
          HX_F8(64), HX_F8(72), HX_F8(80), HX_F8(88), HX_F8(96), HX_F8(104), HX_F8(112), HX_F8(120)
        : "l"(da), "l"(db), "r"(1)
        : "memory");
}

// tile index -> (m0, n0), grouped rasterization: HX_GM block-rows sweep N together (L2 reuse)
__device__ __forceinline__ void hx_tile(int t, int grid_m, int grid_n, int& m0, int& n0) {
    const int per = HX_GM * grid_n;
    const int g = t / per;
    const int first = g * HX_GM;
    const int gsz = min(grid_m - first, HX_GM);
    const int loc = t - g * per;
    m0 = (first + loc % gsz) * 128;
    n0 = (loc / gsz) * 256;
}

extern "C" __global__ void __launch_bounds__(384, 1)
hgemm_tma_ws(const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y,
             int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char hx_dyn[];
    __shared__ __align__(128) unsigned char hx_map_stage[256];
    __shared__ __align__(8) unsigned long long hx_bars[2 * HX_ST];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const bool tma_ok = ((K & 7) == 0) &&
        (((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(w)) & 15ull) == 0ull);
    if (!tma_ok) {
        // TMA needs 16-byte row strides: exact fp32 dot products, one warp per output element
        const int nwarps = blockDim.x >> 5;
        const long long total = (long long)M * N;
        for (long long o = (long long)blockIdx.x * nwarps + warp; o < total;
             o += (long long)gridDim.x * nwarps) {
            const int r = (int)(o / N), c = (int)(o - (long long)r * N);
            const ELEM* xr = x + (size_t)r * K;
            const ELEM* wr = w + (size_t)c * K;
            float s = 0.f;
            for (int k = lane; k < K; k += 32) s = fmaf(hx_f(xr[k]), hx_f(wr[k]), s);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (lane == 0) y[o] = hx_cvt(s);
        }
        return;
    }

    const unsigned base = (hx_smem(hx_dyn) + 1023u) & ~1023u;
    const unsigned sA = base;                        // HX_ST x [128 rows][128 B]
    const unsigned sB = base + HX_ST * 16384;        // HX_ST x [256 rows][128 B]
    const unsigned bar_full = hx_smem(hx_bars);
    const unsigned bar_empty = bar_full + HX_ST * 8;

    const unsigned char* gmap = hx_tmap_store + (size_t)blockIdx.x * 256;
    const void* mapA = gmap;
    const void* mapB = gmap + 128;

    if (warp == 8) {
        const unsigned sm = hx_smem(hx_map_stage);
        asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" :: "r"(sm + lane * 8), "r"(0u), "r"(0u) : "memory");
        __syncwarp();
        if (lane == 0) {
            hx_tmap_fill(sm, x, K, M, 128);
            hx_tmap_fill(sm + 128, w, K, N, 256);
#pragma unroll
            for (int s = 0; s < HX_ST; ++s) {
                hx_mbar_init(bar_full + s * 8, 1u);
                hx_mbar_init(bar_empty + s * 8, 2u);
            }
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncwarp();
        hx_tmap_publish(mapA, sm);
        hx_tmap_publish(mapB, sm + 128);
    }
    __syncthreads();

    const int grid_m = (M + 127) >> 7, grid_n = (N + 255) >> 8;
    const int tiles = grid_m * grid_n;
    const int KT = (K + 63) >> 6;

    if (warp >= 8) {
        // ---------------- producer ----------------
        if (warp == 8 && lane == 0) {
            hx_tmap_acquire(mapA);
            hx_tmap_acquire(mapB);
            int s = 0;
            unsigned ph = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int m0, n0;
                hx_tile(t, grid_m, grid_n, m0, n0);
                for (int kt = 0; kt < KT; ++kt) {
                    hx_mbar_wait(bar_empty + s * 8, ph ^ 1u);
                    hx_mbar_expect_tx(bar_full + s * 8, 49152u);
                    hx_tma_load(sA + s * 16384, mapA, bar_full + s * 8, kt * 64, m0);
                    hx_tma_load(sB + s * 32768, mapB, bar_full + s * 8, kt * 64, n0);
                    if (++s == HX_ST) { s = 0; ph ^= 1u; }
                }
            }
        }
        return;
    }

    // ---------------- consumers ----------------
    const int wg = warp >> 2;
    const bool signal = (tid & 127) == 0;
    const int g = lane >> 2, tq = lane & 3;
    const bool vecN = ((N & 1) == 0) && ((reinterpret_cast<unsigned long long>(y) & 3ull) == 0ull);

    float acc[128];
    int s = 0, ps = 0;
    unsigned ph = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int m0, n0;
        hx_tile(t, grid_m, grid_n, m0, n0);
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.f;
        hx_fence_acc(acc);

        for (int kt = 0; kt < KT; ++kt) {
            hx_mbar_wait(bar_full + s * 8, ph);
            const unsigned long long da = hx_desc(sA + s * 16384 + wg * 8192);
            const unsigned long long db = hx_desc(sB + s * 32768);
            hx_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)   // +32 bytes per k16 step inside the swizzled row
                hx_wgmma_m64n256k16(acc, da + (unsigned long long)(kk * 2), db + (unsigned long long)(kk * 2));
            hx_wgmma_commit();
            hx_wgmma_wait<1>();              // the previous slice's wgmma group has retired
            if (kt > 0 && signal) hx_mbar_arrive(bar_empty + ps * 8);
            ps = s;
            if (++s == HX_ST) { s = 0; ph ^= 1u; }
        }
        hx_wgmma_wait<0>();
        hx_fence_acc(acc);
        if (signal) hx_mbar_arrive(bar_empty + ps * 8);

        // epilogue: acc[4j + 2h + {0,1}] is row 16*(warp&3) + g + 8h, columns 8j + 2tq + {0,1}
        const bool full_n = vecN && (n0 + 256 <= N);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gm = m0 + wg * 64 + (warp & 3) * 16 + g + h * 8;
            if (gm < M) {
                ELEM* yr = y + (size_t)gm * N;
                if (full_n) {
#pragma unroll
                    for (int j = 0; j < 32; ++j) {
                        const int gn = n0 + j * 8 + tq * 2;
                        *reinterpret_cast<unsigned*>(yr + gn) =
                            hx_pack2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < 32; ++j) {
                        const int gn = n0 + j * 8 + tq * 2;
                        const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                        if (vecN && gn + 1 < N) {
                            *reinterpret_cast<unsigned*>(yr + gn) = hx_pack2(v0, v1);
                        } else {
                            if (gn < N) yr[gn] = hx_cvt(v0);
                            if (gn + 1 < N) yr[gn + 1] = hx_cvt(v1);
                        }
                    }
                }
            }
        }
    }
}
// y = x @ w^T (fp16 or bf16 in, fp32 accumulation, rounded once) with Hopper wgmma.
// A block of WGS warpgroups computes a (64*WGS) x 256 tile of y; warpgroup g owns rows 64g..64g+63
// and issues wgmma.m64n256k16 with both operands read from shared memory through descriptors
// (x and w are both K-contiguous, so A and B are both "K-major", no transposes).
// K is walked in 64-wide slices (one 128-byte row per tile row) through a STAGES-deep cp.async ring;
// tiles are written in the 128B-swizzle layout (16-byte chunk c of row r at chunk c ^ (r & 7),
// 1024-byte aligned tiles) that the wgmma descriptors expect. A proxy fence + barrier publishes
// each slice to the async proxy; one wgmma group stays in flight while the next slice is issued,
// so the slot refilled at iteration kt is the one read at kt-2 (STAGES >= 3).
// Out-of-range rows / k are zero-filled; when K % 8 != 0 (or a pointer is misaligned) tiles are
// filled with scalar loads instead. Any M, N, K works.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define NT (WGS * 128)  // threads per block
#define BM (WGS * 64)   // block tile rows
#define BN 256          // block tile columns (= wgmma N)
#define BK 64           // k slice (64 halves = 128 bytes = one swizzle row)

#if BF16
#define FROM_FLOAT(f) __float2bfloat16_rn(f)
#define STORE2(p, a, b) (*reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn((a), (b)))
#define MMA_T "bf16"
#else
#define FROM_FLOAT(f) __float2half_rn(f)
#define STORE2(p, a, b) (*reinterpret_cast<__half2*>(p) = __floats2half2_rn((a), (b)))
#define MMA_T "f16"
#endif

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(unsigned saddr, const void* g, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(saddr), "l"(g), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int P>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(P) : "memory");
}
__device__ __forceinline__ void st_shared_v4(unsigned addr, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int P>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(P) : "memory");
}

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ unsigned long long make_desc(unsigned saddr) {
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4)
         | (1ull << 16)                                  // leading byte offset (unused here)
         | ((unsigned long long)(1024 >> 4) << 32)       // stride byte offset: 8 rows x 128 B
         | (1ull << 62);                                 // swizzle mode: 128B
}

__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

#define WG_F8(b) "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), \
                 "+f"(d[(b) + 4]), "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7])

__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long da,
                                                 unsigned long long db) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." MMA_T "." MMA_T " "
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
        : WG_F8(0), WG_F8(8), WG_F8(16), WG_F8(24), WG_F8(32), WG_F8(40), WG_F8(48), WG_F8(56),
          WG_F8(64), WG_F8(72), WG_F8(80), WG_F8(88), WG_F8(96), WG_F8(104), WG_F8(112), WG_F8(120)
        : "l"(da), "l"(db), "r"(1));
}

// Load a ROWS x 64 slice (rows row0.., k0..) of a K-contiguous matrix into the 128B-swizzled
// tile at shared address sdst (1024-byte aligned). Row r occupies bytes [r*128, r*128+128).
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned sdst, const ELEM* __restrict__ g, int row0,
                                          int nrows, int k0, int K, bool vec, int tid) {
    constexpr int TOTAL = ROWS * 8;  // 16-byte chunks
#pragma unroll
    for (int l = 0; l < (TOTAL + NT - 1) / NT; ++l) {
        const int i = tid + l * NT;
        if (TOTAL % NT == 0 || i < TOTAL) {
            const int r = i >> 3, c = i & 7;  // 8 consecutive threads cover one 128-byte row
            const int gr = row0 + r, gk = k0 + c * 8;
            const unsigned dst = sdst + r * 128 + ((c ^ (r & 7)) << 4);
            if (vec) {
                const bool ok = gr < nrows && gk < K;  // K % 8 == 0: chunk all in or all out
                const ELEM* src = ok ? g + (size_t)gr * K + gk : g;
                cp_async16(dst, src, ok);
            } else {
                const unsigned short* gs = reinterpret_cast<const unsigned short*>(g);
                const bool rok = gr < nrows;
                const size_t rb = (size_t)(rok ? gr : 0) * K;
                unsigned h[8];
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    h[e] = (rok && gk + e < K) ? (unsigned)gs[rb + gk + e] : 0u;
                st_shared_v4(dst, h[0] | (h[1] << 16), h[2] | (h[3] << 16),
                             h[4] | (h[5] << 16), h[6] | (h[7] << 16));
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT, 1)
hgemm_wgmma(const ELEM* __restrict__ x, const ELEM* __restrict__ w, ELEM* __restrict__ y,
            int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sA = base;                               // STAGES x [BM][128 B]
    const unsigned sB = base + STAGES * BM * 128;           // STAGES x [BN][128 B]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wl = warp & 3;  // warpgroup, warp within warpgroup

    // grouped rasterization: GROUP_M block-rows sweep N together for L2 reuse
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * grid_n;
    const int group = pid / per_group;
    const int first_m = group * GROUP_M;
    const int gsz = min(grid_m - first_m, GROUP_M);
    const int local = pid - group * per_group;
    const int m0 = (first_m + local % gsz) * BM;
    const int n0 = (local / gsz) * BN;

    const bool vec = ((K & 7) == 0) &&
                     (((reinterpret_cast<unsigned long long>(x) |
                        reinterpret_cast<unsigned long long>(w)) & 15ull) == 0ull);
    const int KT = (K + BK - 1) / BK;

    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;

    // prologue: STAGES-2 slices in flight (always commit so group counting stays uniform)
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < KT) {
            load_tile<BM>(sA + s * (BM * 128), x, m0, M, s * BK, K, vec, tid);
            load_tile<BN>(sB + s * (BN * 128), w, n0, N, s * BK, K, vec, tid);
        }
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 3>();  // this thread's copies of slice kt have landed
        fence_proxy_async();          // make them visible to the async proxy (wgmma)
        __syncthreads();              // everyone's; and every warp has finished wgmma of kt-2

        {   // refill the slot read by slice kt-2
            const int nk = kt + STAGES - 2;
            if (nk < KT) {
                const int ns = nk % STAGES;
                load_tile<BM>(sA + ns * (BM * 128), x, m0, M, nk * BK, K, vec, tid);
                load_tile<BN>(sB + ns * (BN * 128), w, n0, N, nk * BK, K, vec, tid);
            }
            cp_async_commit();
        }

        const int st = kt % STAGES;
        const unsigned long long da = make_desc(sA + st * (BM * 128) + wg * (64 * 128));
        const unsigned long long db = make_desc(sB + st * (BN * 128));

        wgmma_fence();
        fence_acc(d);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)  // +32 bytes along the swizzled row = +2 encoded
            wgmma_m64n256k16(d, da + 2ull * kk, db + 2ull * kk);
        wgmma_commit();
        fence_acc(d);
        wgmma_wait<1>();  // slice kt-1's wgmma done (this warpgroup)
    }
    wgmma_wait<0>();
    fence_acc(d);
    cp_async_wait<0>();

    // epilogue: d[4j + 2h + {0,1}] is row (16*wl + lane/4 + 8h), cols 8j + 2*(lane%4) + {0,1}
    const int g = lane >> 2, t = (lane & 3) * 2;
    const int rbase = m0 + wg * 64 + wl * 16 + g;
    const bool vecN = ((N & 1) == 0) && ((reinterpret_cast<unsigned long long>(y) & 3ull) == 0ull);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int gm = rbase + h * 8;
        if (gm < M) {
            ELEM* yr = y + (size_t)gm * N;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int gn = n0 + j * 8 + t;
                const float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
                if (vecN && gn + 1 < N) {
                    STORE2(yr + gn, v0, v1);
                } else {
                    if (gn < N) yr[gn] = FROM_FLOAT(v0);
                    if (gn + 1 < N) yr[gn + 1] = FROM_FLOAT(v1);
                }
            }
        }
    }
}
