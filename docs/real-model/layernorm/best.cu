// cuda-evolve: best kernel of run rm-layernorm, task layernorm, on NVIDIA H200.
// 0.267 ms: 4022 GB/s = 91.5% of the measured 4394 GB/s bandwidth ceiling (91.5% of the roofline).
// Tunables and the task's defines are baked in as #defines below: it compiles on its own.
// best.py beside it launches it on CuPy arrays or PyTorch tensors.
// Launch at rows=32768,cols=4096:
//   layernorm_rowblock<<<(32768, 1, 1), (256, 1, 1), 0>>>(x, gamma, beta, y, 32768, 4096)
#define BLOCK 256
#define VPT 4
#define EPS 1.0e-5f
// One block per row. The row is loaded once, coalesced (float4 when cols % 4 == 0),
// and kept in registers; mean and centered variance come from registers through
// warp-shuffle + shared-memory block reductions; the output goes out with float4
// streaming stores. Rows longer than the register capacity (VPT*4*BLOCK floats)
// fall back to re-reading the tail from global memory / L2.
/*@evolve
kernels:
  - name: layernorm_rowblock
    grid: rows
    block: BLOCK
    shared: 0
    args: [x, gamma, beta, y, rows, cols]
tunables:
  BLOCK: {values: [128, 256, 512, 1024], default: 256}
  VPT: {values: [1, 2, 4, 8], default: 4}
arch_specific: false
*/

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31;
    const int wid = threadIdx.x >> 5;
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float t = (lane < (BLOCK / 32)) ? sh[lane] : 0.f;
    t = warp_sum(t);
    __syncthreads();  // allow sh to be reused
    return t;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_rowblock(const float* __restrict__ x, const float* __restrict__ gamma,
                   const float* __restrict__ beta, float* __restrict__ y,
                   int rows, int cols) {
    __shared__ float sh[32];
    const int r = blockIdx.x;
    if (r >= rows) return;  // uniform per block
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    const int tid = threadIdx.x;
    const float fcols = (float)cols;

    if ((cols & 3) == 0) {
        // ---------------- vectorized path ----------------
        const int n4 = cols >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* g4 = reinterpret_cast<const float4*>(gamma);
        const float4* b4 = reinterpret_cast<const float4*>(beta);
        float4* y4 = reinterpret_cast<float4*>(yr);

        float4 v[VPT];
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int idx = tid + i * BLOCK;
            if (idx < n4) v[i] = x4[idx];
            else v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        for (int idx = tid + VPT * BLOCK; idx < n4; idx += BLOCK) {
            const float4 t = x4[idx];
            s += (t.x + t.y) + (t.z + t.w);
        }
        const float mean = block_sum(s, sh) / fcols;

        float q = 0.f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int idx = tid + i * BLOCK;
            if (idx < n4) {
                const float a = v[i].x - mean, b = v[i].y - mean;
                const float c = v[i].z - mean, d = v[i].w - mean;
                q += (a * a + b * b) + (c * c + d * d);
            }
        }
        for (int idx = tid + VPT * BLOCK; idx < n4; idx += BLOCK) {
            const float4 t = x4[idx];
            const float a = t.x - mean, b = t.y - mean;
            const float c = t.z - mean, d = t.w - mean;
            q += (a * a + b * b) + (c * c + d * d);
        }
        const float rstd = rsqrtf(block_sum(q, sh) / fcols + EPS);

#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int idx = tid + i * BLOCK;
            if (idx < n4) {
                const float4 g = __ldg(g4 + idx);
                const float4 b = __ldg(b4 + idx);
                float4 o;
                o.x = (v[i].x - mean) * rstd * g.x + b.x;
                o.y = (v[i].y - mean) * rstd * g.y + b.y;
                o.z = (v[i].z - mean) * rstd * g.z + b.z;
                o.w = (v[i].w - mean) * rstd * g.w + b.w;
                __stcs(y4 + idx, o);
            }
        }
        for (int idx = tid + VPT * BLOCK; idx < n4; idx += BLOCK) {
            const float4 t = x4[idx];
            const float4 g = __ldg(g4 + idx);
            const float4 b = __ldg(b4 + idx);
            float4 o;
            o.x = (t.x - mean) * rstd * g.x + b.x;
            o.y = (t.y - mean) * rstd * g.y + b.y;
            o.z = (t.z - mean) * rstd * g.z + b.z;
            o.w = (t.w - mean) * rstd * g.w + b.w;
            __stcs(y4 + idx, o);
        }
    } else {
        // ---------------- scalar path (cols not a multiple of 4) ----------------
        constexpr int NS = 4 * VPT;
        float v[NS];
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < NS; ++i) {
            const int idx = tid + i * BLOCK;
            v[i] = (idx < cols) ? xr[idx] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < NS; ++i) s += v[i];
        for (int idx = tid + NS * BLOCK; idx < cols; idx += BLOCK) s += xr[idx];
        const float mean = block_sum(s, sh) / fcols;

        float q = 0.f;
#pragma unroll
        for (int i = 0; i < NS; ++i) {
            const int idx = tid + i * BLOCK;
            if (idx < cols) {
                const float d = v[i] - mean;
                q += d * d;
            }
        }
        for (int idx = tid + NS * BLOCK; idx < cols; idx += BLOCK) {
            const float d = xr[idx] - mean;
            q += d * d;
        }
        const float rstd = rsqrtf(block_sum(q, sh) / fcols + EPS);

#pragma unroll
        for (int i = 0; i < NS; ++i) {
            const int idx = tid + i * BLOCK;
            if (idx < cols) yr[idx] = (v[i] - mean) * rstd * __ldg(gamma + idx) + __ldg(beta + idx);
        }
        for (int idx = tid + NS * BLOCK; idx < cols; idx += BLOCK)
            yr[idx] = (xr[idx] - mean) * rstd * __ldg(gamma + idx) + __ldg(beta + idx);
    }
}
