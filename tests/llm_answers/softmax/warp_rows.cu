// One warp per row, ROWS rows per block of 32 x ROWS threads; no shared memory and no
// __syncthreads: every reduction is a warp shuffle. One pass over the row keeps an online
// (max, sum of exp(x - max)) per lane, in float4s when cols % 4 == 0 and both pointers are
// 16-byte aligned, in scalars otherwise. The first 4 * CACHE floats of each lane's share of the
// row stay in registers, so the write pass re-reads global memory only where a row is wider than
// 128 * CACHE floats. The lanes' (max, sum) pairs merge in an xor butterfly, so every lane ends
// with the same bits.
/*@evolve
kernels:
  - name: softmax_warp_rows
    grid: ceil_div(rows, ROWS)
    block: [32, ROWS]
    args: [x, y, rows, cols]
tunables:
  ROWS: {values: [1, 2, 4, 8], default: 4}
  CACHE: {values: [8, 16, 32], default: 32}
restrictions:
  - ROWS * CACHE <= 128   # ROWS 8, CACHE 32 needs 255 registers a lane: one block per SM
*/
#define NEG_INF __int_as_float(0xff800000)  // NVRTC has no math.h
#define FULL_MASK 0xffffffffu

// (m, s) absorbs (om, os): both are (max, sum of exp(x - max)); an empty lane is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float om, float os) {
    const float mn = fmaxf(m, om);
    const float a = m == NEG_INF ? 0.f : s * expf(m - mn);
    const float b = om == NEG_INF ? 0.f : os * expf(om - mn);
    m = mn;
    s = a + b;
}

// Unit u of the row is a float4 (VEC) or a float; lane l owns units l, l + 32, l + 64, ...
template <bool VEC>
__device__ __forceinline__ void warp_softmax(const float* __restrict__ xr, float* __restrict__ yr,
                                             int cols) {
    constexpr int W = VEC ? 4 : 1;         // floats per unit
    constexpr int KEEP = 4 * CACHE / W;    // units a lane keeps in registers
    const int lane = threadIdx.x;
    const int n = VEC ? cols >> 2 : cols;  // units in the row
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
    float4* __restrict__ y4 = reinterpret_cast<float4*>(yr);

    float v[4 * CACHE];
#pragma unroll
    for (int k = 0; k < KEEP; ++k) {
        const int u = lane + 32 * k;
        if constexpr (VEC) {
            const float4 t = u < n ? x4[u] : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            v[4 * k] = t.x;
            v[4 * k + 1] = t.y;
            v[4 * k + 2] = t.z;
            v[4 * k + 3] = t.w;
        } else {
            v[k] = u < n ? xr[u] : NEG_INF;
        }
    }
    float m = NEG_INF;
#pragma unroll
    for (int j = 0; j < 4 * CACHE; ++j) m = fmaxf(m, v[j]);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 4 * CACHE; ++j) s += lane + 32 * (j / W) < n ? expf(v[j] - m) : 0.f;

    // the rest of a wide row, online: rescale the running sum whenever the max grows
    for (int u = lane + 32 * KEEP; u < n; u += 32) {
        if constexpr (VEC) {
            const float4 t = x4[u];
            const float mn = fmaxf(m, fmaxf(fmaxf(t.x, t.y), fmaxf(t.z, t.w)));
            s = s * expf(m - mn) + ((expf(t.x - mn) + expf(t.y - mn)) + (expf(t.z - mn) + expf(t.w - mn)));
            m = mn;
        } else {
            const float t = xr[u];
            const float mn = fmaxf(m, t);
            s = s * expf(m - mn) + expf(t - mn);
            m = mn;
        }
    }

#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float om = __shfl_xor_sync(FULL_MASK, m, off);
        const float os = __shfl_xor_sync(FULL_MASK, s, off);
        merge(m, s, om, os);
    }
    const float inv = 1.f / s;

#pragma unroll
    for (int k = 0; k < KEEP; ++k) {
        const int u = lane + 32 * k;
        if (u < n) {
            if constexpr (VEC) {
                y4[u] = make_float4(expf(v[4 * k] - m) * inv, expf(v[4 * k + 1] - m) * inv,
                                    expf(v[4 * k + 2] - m) * inv, expf(v[4 * k + 3] - m) * inv);
            } else {
                yr[u] = expf(v[k] - m) * inv;
            }
        }
    }
    for (int u = lane + 32 * KEEP; u < n; u += 32) {
        if constexpr (VEC) {
            const float4 t = x4[u];
            y4[u] = make_float4(expf(t.x - m) * inv, expf(t.y - m) * inv,
                                expf(t.z - m) * inv, expf(t.w - m) * inv);
        } else {
            yr[u] = expf(xr[u] - m) * inv;
        }
    }
}

extern "C" __global__ void __launch_bounds__(32 * ROWS)
softmax_warp_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const int row = blockIdx.x * ROWS + threadIdx.y;
    if (row >= rows) return;  // the whole warp leaves together: the shuffles stay full-mask
    const float* __restrict__ xr = x + (size_t)row * cols;
    float* __restrict__ yr = y + (size_t)row * cols;
    const bool vec = (cols & 3) == 0 &&
        ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15) == 0;
    if (vec) warp_softmax<true>(xr, yr, cols);
    else warp_softmax<false>(xr, yr, cols);
}
