// One block per row. A row that fits on chip (cols <= 4 * ITEMS * BLOCK) is read ONCE: each
// thread keeps ITEMS float4s (4 * ITEMS floats when cols % 4 != 0 or a pointer is not 16-byte
// aligned), strided by BLOCK so loads coalesce, in registers; block max, exp in place, block
// sum, one write of exp(x - max) / sum. Block reductions: warp shuffles, one shared slot per
// warp, then every warp reduces the slots. Wider rows fall back to two passes over global
// memory: an online (max, sum of exp) per thread, then a re-read that writes the output.
/*@evolve
kernels:
  - name: softmax_block_row
    grid: rows
    block: BLOCK
    args: [x, y, rows, cols]
tunables:
  BLOCK: {values: [64, 128, 256, 512, 1024], default: 256}
  ITEMS: {values: [1, 2, 4, 8, 16], default: 4}
restrictions:
  - BLOCK * ITEMS >= 1024   # a row of 4096 floats fits on chip
  - BLOCK * ITEMS <= 4096   # at most 64 KiB of row data in one block's registers
*/
#define NEG_INF __int_as_float(0xff800000)  // NVRTC has no math.h
#define NWARPS (BLOCK / 32)
#define CAP (4 * ITEMS * BLOCK)  // floats of a row kept in registers

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Every thread gets the block's result, the same bits everywhere (xor butterflies, and every
// warp reduces the same slots in the same order). Each call needs its own sh[NWARPS].
__device__ __forceinline__ float block_max(float v, float* sh) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    return warp_max(lane < NWARPS ? sh[lane] : NEG_INF);
}

__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    return warp_sum(lane < NWARPS ? sh[lane] : 0.f);
}

// The row in registers: unit k of a thread (a float4 if VEC, else a float) is the row's unit
// threadIdx.x + k * BLOCK; v[] is indexed only by unrolled constants, so it never spills.
template <bool VEC>
__device__ __forceinline__ void on_chip(const float* __restrict__ xr, float* __restrict__ yr,
                                        int cols, float* sh_max, float* sh_sum) {
    constexpr int W = VEC ? 4 : 1;           // floats per unit
    constexpr int UNITS = 4 * ITEMS / W;     // units per thread
    const int n = VEC ? cols >> 2 : cols;    // units in the row
    const int tid = threadIdx.x;
    float v[4 * ITEMS];
#pragma unroll
    for (int k = 0; k < UNITS; ++k) {
        const int i = tid + k * BLOCK;
        if constexpr (VEC) {
            const float4 t = i < n ? reinterpret_cast<const float4*>(xr)[i]
                                   : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            v[4 * k] = t.x;
            v[4 * k + 1] = t.y;
            v[4 * k + 2] = t.z;
            v[4 * k + 3] = t.w;
        } else {
            v[k] = i < n ? xr[i] : NEG_INF;
        }
    }

    float m = NEG_INF;
#pragma unroll
    for (int j = 0; j < 4 * ITEMS; ++j) m = fmaxf(m, v[j]);
    m = block_max(m, sh_max);

    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 4 * ITEMS; ++j) {
        v[j] = tid + (j / W) * BLOCK < n ? expf(v[j] - m) : 0.f;
        s += v[j];
    }
    const float inv = 1.f / block_sum(s, sh_sum);

#pragma unroll
    for (int k = 0; k < UNITS; ++k) {
        const int i = tid + k * BLOCK;
        if (i < n) {
            if constexpr (VEC) {
                reinterpret_cast<float4*>(yr)[i] = make_float4(
                    v[4 * k] * inv, v[4 * k + 1] * inv, v[4 * k + 2] * inv, v[4 * k + 3] * inv);
            } else {
                yr[i] = v[k] * inv;
            }
        }
    }
}

// Rows wider than CAP: pass 1 keeps an online (m, s = sum of exp(x - m)) per thread, the block
// max M rescales each s to exp(x - M), a block sum adds them; pass 2 re-reads x (mostly from L2).
__device__ __forceinline__ void multi_pass(const float* __restrict__ xr, float* __restrict__ yr,
                                           int cols, bool vec, float* sh_max, float* sh_sum) {
    const int tid = threadIdx.x;
    float m = NEG_INF, s = 0.f;
    if (vec) {
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
        for (int i = tid; i < (cols >> 2); i += BLOCK) {
            const float4 t = x4[i];
            const float mn = fmaxf(m, fmaxf(fmaxf(t.x, t.y), fmaxf(t.z, t.w)));
            s = s * expf(m - mn)  // m may be -inf: expf(-inf) = 0
                + (expf(t.x - mn) + expf(t.y - mn)) + (expf(t.z - mn) + expf(t.w - mn));
            m = mn;
        }
    } else {
        for (int i = tid; i < cols; i += BLOCK) {
            const float t = xr[i];
            if (t > m) {
                s = s * expf(m - t) + 1.f;
                m = t;
            } else {
                s += expf(t - m);
            }
        }
    }
    const float mx = block_max(m, sh_max);
    const float inv = 1.f / block_sum(m == NEG_INF ? 0.f : s * expf(m - mx), sh_sum);

    if (vec) {
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
        float4* __restrict__ y4 = reinterpret_cast<float4*>(yr);
        for (int i = tid; i < (cols >> 2); i += BLOCK) {
            float4 t = x4[i];
            t.x = expf(t.x - mx) * inv;
            t.y = expf(t.y - mx) * inv;
            t.z = expf(t.z - mx) * inv;
            t.w = expf(t.w - mx) * inv;
            y4[i] = t;
        }
    } else {
        for (int i = tid; i < cols; i += BLOCK) yr[i] = expf(xr[i] - mx) * inv;
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_block_row(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float sh_max[NWARPS], sh_sum[NWARPS];
    const float* __restrict__ xr = x + (size_t)blockIdx.x * cols;
    float* __restrict__ yr = y + (size_t)blockIdx.x * cols;
    // cols % 4 == 0 and 16-byte aligned bases: every row starts 16-byte aligned
    const bool vec = (cols & 3) == 0 &&
        ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15) == 0;
    if (cols <= CAP) {  // uniform across the block, so the __syncthreads inside are safe
        if (vec) on_chip<true>(xr, yr, cols, sh_max, sh_sum);
        else on_chip<false>(xr, yr, cols, sh_max, sh_sum);
    } else {
        multi_pass(xr, yr, cols, vec, sh_max, sh_sum);
    }
}
