// One block per row, two passes over the row with the second served by L2: pass 1 reads the row
// asking the caches to keep it (it is about to be read again) and sums d and d*d of
// d = x - x[row, 0] (the shift avoids the cancellation of E[x^2] - E[x]^2); pass 2 re-reads it
// marked evict-first (done with it), gamma and beta marked keep (every row reads them), and
// writes y. Nothing is held in registers across the passes, so blocks stay small and many rows
// are in flight per SM. Each thread issues UNROLL 16-byte loads at a time. LOAD: 0 plain
// read-only loads; 1 read-only loads with an L2 eviction policy; 2 L1 eviction priorities and an
// L2 eviction policy. STORE: 0 plain stores of y, 1 streaming (evict-first) stores. cols % 4 != 0
// or unaligned pointers take the same two passes with scalar accesses.
/*@evolve
kernels:
  - name: layernorm_two_pass
    grid: rows
    block: BLOCK
    args: [x, gamma, beta, y, rows, cols]
tunables:
  BLOCK: {values: [128, 256, 512, 1024], default: 256}
  UNROLL: {values: [1, 2, 4], default: 2}
  LOAD: {values: [0, 1, 2], default: 2}
  STORE: {values: [0, 1], default: 0}
restrictions:
  - BLOCK * UNROLL <= 2048   # a row of 4096 floats is 1024 float4s: more would idle threads
*/
#define NWARPS (BLOCK / 32)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Every thread gets the block's sum, the same bits everywhere. Consecutive calls alternate two
// sh[NWARPS] arrays: the other call's __syncthreads keeps a fast warp from overwriting slots a
// slow warp has yet to read.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    return warp_sum(lane < NWARPS ? sh[lane] : 0.f);
}

// Cache eviction hints (sm_80 and later; older GPUs load plainly): an L2 eviction policy, and
// with LOAD == 2 the matching L1 eviction priority on a plain (not read-only path) load.
#define EVICT_LAST 0
#define EVICT_FIRST 1

template <int PRIORITY>
__device__ __forceinline__ float4 load(const float4* p) {
#if __CUDA_ARCH__ >= 800
    if (LOAD) {
        unsigned long long policy;
        float4 v;
        if (PRIORITY == EVICT_LAST) asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
        else asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        if (LOAD == 1)
            asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
        else if (PRIORITY == EVICT_LAST)
            asm("ld.global.L1::evict_last.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
        else
            asm("ld.global.L1::evict_first.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
        return v;
    }
#endif
    return __ldg(p);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_two_pass(const float* __restrict__ x, const float* __restrict__ gamma,
                   const float* __restrict__ beta, float* __restrict__ y, int rows, int cols) {
    __shared__ float sh_a[NWARPS], sh_b[NWARPS];
    const int tid = threadIdx.x;
    const float* __restrict__ xr = x + (size_t)blockIdx.x * cols;
    float* __restrict__ yr = y + (size_t)blockIdx.x * cols;
    // cols % 4 == 0 and 16-byte aligned bases: every row, and gamma and beta, 16-byte aligned
    const unsigned long long bases = reinterpret_cast<unsigned long long>(x) |
        reinterpret_cast<unsigned long long>(gamma) | reinterpret_cast<unsigned long long>(beta) |
        reinterpret_cast<unsigned long long>(y);
    const bool vec = (cols & 3) == 0 && (bases & 15) == 0;
    const float shift = xr[0];
    const float inv_n = 1.f / cols;
    float s1 = 0.f, s2 = 0.f;
    if (vec) {  // uniform across the block, so the __syncthreads inside are safe
        const int n4 = cols >> 2;
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
        for (int base = tid; base < n4; base += BLOCK * UNROLL) {
            float4 t[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (base + u * BLOCK < n4) t[u] = load<EVICT_LAST>(x4 + base + u * BLOCK);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (base + u * BLOCK < n4) {
                    const float d0 = t[u].x - shift, d1 = t[u].y - shift;
                    const float d2 = t[u].z - shift, d3 = t[u].w - shift;
                    s1 += (d0 + d1) + (d2 + d3);
                    s2 += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
                }
            }
        }
        const float dmean = block_sum(s1, sh_a) * inv_n;  // mean - shift
        const float rstd = rsqrtf(fmaxf(block_sum(s2, sh_b) * inv_n - dmean * dmean, 0.f) + EPS);
        const float mean = shift + dmean;

        const float4* __restrict__ g4 = reinterpret_cast<const float4*>(gamma);
        const float4* __restrict__ b4 = reinterpret_cast<const float4*>(beta);
        float4* __restrict__ y4 = reinterpret_cast<float4*>(yr);
        for (int base = tid; base < n4; base += BLOCK * UNROLL) {
            float4 t[UNROLL], g[UNROLL], b[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * BLOCK;
                if (i < n4) {
                    t[u] = load<EVICT_FIRST>(x4 + i);
                    g[u] = load<EVICT_LAST>(g4 + i);
                    b[u] = load<EVICT_LAST>(b4 + i);
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * BLOCK;
                if (i < n4) {
                    const float4 o = make_float4((t[u].x - mean) * rstd * g[u].x + b[u].x,
                                                 (t[u].y - mean) * rstd * g[u].y + b[u].y,
                                                 (t[u].z - mean) * rstd * g[u].z + b[u].z,
                                                 (t[u].w - mean) * rstd * g[u].w + b[u].w);
                    if (STORE) __stcs(y4 + i, o);
                    else y4[i] = o;
                }
            }
        }
    } else {
        for (int i = tid; i < cols; i += BLOCK) {
            const float d = xr[i] - shift;
            s1 += d;
            s2 += d * d;
        }
        const float dmean = block_sum(s1, sh_a) * inv_n;
        const float rstd = rsqrtf(fmaxf(block_sum(s2, sh_b) * inv_n - dmean * dmean, 0.f) + EPS);
        const float mean = shift + dmean;
        for (int i = tid; i < cols; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
    }
}
