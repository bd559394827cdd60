// cuda-evolve: best kernel of run rm-reduce_sum, task reduce_sum, on NVIDIA H200.
// 0.2508 ms: 4282 GB/s = 95.2% of the measured 4499 GB/s bandwidth ceiling (95.2% of the roofline).
// Tunables and the task's defines are baked in as #defines below: it compiles on its own.
// best.py beside it launches it on CuPy arrays or PyTorch tensors.
// Launch at n=268435456:
//   reduce_block_partials<<<(4224, 1, 1), (1024, 1, 1), 0>>>(x, partial, out, 268435456)
#define BLOCK 1024
#define GRID 4224
#define UNROLL 4
// Two kernels. First: one element per thread, a shared-memory tree per block, one partial sum
// per block into scratch. Second: one block of 1024 threads sums the partials the same way.
// Simple and correct; every call rewrites every partial, so the scratch needs no zeroing.
/*@evolve
kernels:
  - name: reduce_block_partials
    grid: "max(1, min(GRID, ceil_div(n, BLOCK * 4)))"
    block: BLOCK
    args: [x, partial, out, n]
scratch:
  partial: {dtype: float32, size: GRID, zero: false}
tunables:
  BLOCK: {values: [256, 512, 1024], default: 1024}
  GRID: {values: [264, 528, 1056, 2112, 4224], default: 2112}
  UNROLL: {values: [2, 4, 8], default: 2}
*/
#define FINAL_THREADS 1024

__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Counts finished blocks; the last block resets it to 0, so it is 0 at the start of every launch.
__device__ unsigned int g_blocks_done = 0u;

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_block_partials(const float* __restrict__ x, float* __restrict__ partial,
                      float* __restrict__ out, int n) {
    const int t = threadIdx.x;
    const int tid = blockIdx.x * BLOCK + t;
    const int nthreads = gridDim.x * BLOCK;

    float acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0.f;

    if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0ull) {
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
        const int n4 = n >> 2;
        int i = tid;
        // Main loop: UNROLL independent 16-byte loads in flight per thread.
        for (; i + (UNROLL - 1) * nthreads < n4; i += UNROLL * nthreads) {
            float4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(x4 + i + u * nthreads);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) acc[u] += (v[u].x + v[u].y) + (v[u].z + v[u].w);
        }
        for (; i < n4; i += nthreads) {
            float4 v = __ldg(x4 + i);
            acc[0] += (v.x + v.y) + (v.z + v.w);
        }
        // Tail: at most 3 scalars.
        const int rem = n - (n4 << 2);
        if (tid < rem) acc[0] += __ldg(x + (n4 << 2) + tid);
    } else {
        for (int i = tid; i < n; i += nthreads) acc[0] += __ldg(x + i);
    }

    float s = 0.f;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) s += acc[u];

    __shared__ float ws[BLOCK / 32];
    __shared__ double wd[BLOCK / 32];
    __shared__ unsigned int s_last;
    const int lane = t & 31, warp = t >> 5;
    s = warp_sum_f(s);
    if (lane == 0) ws[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < BLOCK / 32 ? ws[lane] : 0.f;
        s = warp_sum_f(s);
        if (lane == 0) {
            partial[blockIdx.x] = s;
            __threadfence();
            const unsigned int prev = atomicAdd(&g_blocks_done, 1u);
            s_last = (prev == gridDim.x - 1u) ? 1u : 0u;
        }
    }
    __syncthreads();
    if (s_last == 0u) return;

    // Last block: sum all partials in double, in a fixed order (deterministic).
    __threadfence();
    const int count = (int)gridDim.x;
    double a = 0.0;
    for (int i = t; i < count; i += BLOCK) a += (double)__ldcg(partial + i);
    a = warp_sum_d(a);
    if (lane == 0) wd[warp] = a;
    __syncthreads();
    if (warp == 0) {
        a = lane < BLOCK / 32 ? wd[lane] : 0.0;
        a = warp_sum_d(a);
        if (lane == 0) {
            out[0] = (float)a;
            atomicExch(&g_blocks_done, 0u);
        }
    }
}
