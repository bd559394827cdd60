// cuda-evolve: best kernel of run rm-softmax, task softmax, on NVIDIA H200.
// 0.2565 ms: 4185 GB/s = 94.3% of the measured 4441 GB/s bandwidth ceiling (94.3% of the roofline).
// Tunables and the task's defines are baked in as #defines below: it compiles on its own.
// best.py beside it launches it on CuPy arrays or PyTorch tensors.
// Launch at rows=32768,cols=4096:
//   softmax_row<<<(32768, 1, 1), (512, 1, 1), 0>>>(x, y, 32768, 4096)
#define BLOCK 512
#define VPT 4
// One block per row. Fast path (cols % 4 == 0 and cols/4 <= BLOCK*VPT): the row is read once as
// coalesced float4 into registers, block-reduced for max and sum, and written once.
// Fallback: three coalesced block-strided passes (the re-reads mostly hit L2).
/*@evolve
kernels:
  - name: softmax_row
    grid: rows
    block: BLOCK
    shared: 0
    args: [x, y, rows, cols]
tunables:
  BLOCK: {values: [128, 256, 512, 1024], default: 256}
  VPT: {values: [1, 2, 4, 8], default: 4}
*/

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_max(float v, float* sh) {
    v = warp_max(v);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = (lane < BLOCK / 32) ? sh[lane] : NEG_INF;
    v = warp_max(v);
    __syncthreads();  // sh may be reused afterwards
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = (lane < BLOCK / 32) ? sh[lane] : 0.f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_row(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float sh[32];
    const int r = blockIdx.x;
    if (r >= rows) return;  // uniform across the block
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    const int tid = threadIdx.x;
    const int nv = cols >> 2;

    if ((cols & 3) == 0 && nv <= BLOCK * VPT) {
        const float4* xv = reinterpret_cast<const float4*>(xr);
        float4* yv = reinterpret_cast<float4*>(yr);
        float4 v[VPT];
        float m = NEG_INF;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int i = tid + k * BLOCK;
            if (i < nv) v[k] = xv[i];
            else v[k] = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
        }
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
        m = block_max(m, sh);

        float s = 0.f;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            v[k].x = __expf(v[k].x - m);
            v[k].y = __expf(v[k].y - m);
            v[k].z = __expf(v[k].z - m);
            v[k].w = __expf(v[k].w - m);
            s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
        s = block_sum(s, sh);
        const float inv = 1.f / s;

#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int i = tid + k * BLOCK;
            if (i < nv)
                yv[i] = make_float4(v[k].x * inv, v[k].y * inv, v[k].z * inv, v[k].w * inv);
        }
    } else {
        float m = NEG_INF;
        for (int c = tid; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
        m = block_max(m, sh);
        float s = 0.f;
        for (int c = tid; c < cols; c += BLOCK) s += __expf(xr[c] - m);
        s = block_sum(s, sh);
        const float inv = 1.f / s;
        for (int c = tid; c < cols; c += BLOCK) yr[c] = __expf(xr[c] - m) * inv;
    }
}
