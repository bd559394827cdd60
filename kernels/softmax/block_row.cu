// One block per row. Pass 1 reads the row once and keeps an online (max, sum of exp) pair per
// thread; warp shuffles, then one pair per warp in shared memory, merge them into the row's
// pair. Pass 2 re-reads the row (mostly from L2) and writes exp(x - max) / sum. With VEC == 4
// and cols % 4 == 0 (every row then starts 16-byte aligned) both passes use float4 accesses;
// otherwise scalar, coalesced accesses.
/*@evolve
kernels:
  - name: softmax_block_row
    grid: rows
    block: BLOCK
    args: [x, y, rows, cols]
tunables:
  BLOCK: {values: [32, 64, 128, 256, 512, 1024], default: 256}
  VEC: {values: [1, 4], default: 4}
*/
#define NEG_INF __int_as_float(0xff800000)  // NVRTC has no math.h

// (m, s) <- (m, s) merged with (m2, s2), where s is a sum of exp(v - m). An empty pair is
// (-inf, 0); merging two empty pairs must not compute exp(-inf - -inf) = NaN.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    if (mm == NEG_INF) return;
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_block_row(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float sh_m[32], sh_s[32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float* __restrict__ xr = x + (size_t)blockIdx.x * cols;
    float* __restrict__ yr = y + (size_t)blockIdx.x * cols;
    const bool vec = VEC == 4 && (cols & 3) == 0;

    float m = NEG_INF, s = 0.f;
    if (vec) {
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
        for (int i = tid; i < (cols >> 2); i += BLOCK) {
            float4 v = x4[i];
            float mn = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
            s = s * expf(m - mn)  // m may be -inf: expf(-inf) = 0
                + (expf(v.x - mn) + expf(v.y - mn)) + (expf(v.z - mn) + expf(v.w - mn));
            m = mn;
        }
    } else {
        for (int i = tid; i < cols; i += BLOCK) {
            float v = xr[i];
            if (v > m) {
                s = s * expf(m - v) + 1.f;
                m = v;
            } else {
                s += expf(v - m);
            }
        }
    }

    warp_merge(m, s);
    if (lane == 0) {
        sh_m[warp] = m;
        sh_s[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < BLOCK / 32 ? sh_m[lane] : NEG_INF;
        s = lane < BLOCK / 32 ? sh_s[lane] : 0.f;
        warp_merge(m, s);
        if (lane == 0) {
            sh_m[0] = m;
            sh_s[0] = s;
        }
    }
    __syncthreads();
    m = sh_m[0];
    const float inv = 1.f / sh_s[0];

    if (vec) {
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
        float4* __restrict__ y4 = reinterpret_cast<float4*>(yr);
        for (int i = tid; i < (cols >> 2); i += BLOCK) {
            float4 v = x4[i];
            v.x = expf(v.x - m) * inv;
            v.y = expf(v.y - m) * inv;
            v.z = expf(v.z - m) * inv;
            v.w = expf(v.w - m) * inv;
            y4[i] = v;
        }
    } else {
        for (int i = tid; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) * inv;
    }
}
