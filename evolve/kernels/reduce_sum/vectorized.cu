// Two kernels. First: a grid of min(GRID, n / (4*BLOCK)) blocks walks the input in a grid-stride
// loop of 16-byte float4 loads, UNROLL independent float4s (and accumulators) in flight per
// thread; the n % 4 trailing elements are added by the first threads; warp shuffles, then one
// value per warp in shared memory, reduce each block to one partial in scratch. Second: one
// block of 1024 threads reduces the partials the same way and writes out[0].
/*@evolve
kernels:
  - name: reduce_vec4_partials
    grid: min(GRID, ceil_div(n, 4 * BLOCK))
    block: BLOCK
    args: [x, partial, n]
  - name: reduce_vec4_final
    grid: 1
    block: 1024
    args: [partial, out, "min(GRID, ceil_div(n, 4 * BLOCK))"]
scratch:
  partial: {dtype: float32, size: "min(GRID, ceil_div(n, 4 * BLOCK))"}
tunables:
  BLOCK: {values: [256, 512, 1024], default: 256}
  UNROLL: {values: [1, 2, 4], default: 2}
  GRID: {values: [264, 528, 1056, 2112], default: 1056}
*/
#define FINAL_THREADS 1024

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; the result is valid in thread 0. NTHREADS is a multiple of 32.
template <int NTHREADS>
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < NTHREADS / 32 ? warp_part[lane] : 0.f;
        v = warp_sum(v);
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_vec4_partials(const float* __restrict__ x, float* __restrict__ partial, int n) {
    const int n4 = n >> 2;
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
    const int gid = blockIdx.x * BLOCK + threadIdx.x;
    const int stride = gridDim.x * BLOCK;

    float4 acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = make_float4(0.f, 0.f, 0.f, 0.f);

    int i = gid;
    // main loop: UNROLL whole float4s per thread per iteration, all in bounds
    for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = x4[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            acc[u].x += v[u].x;
            acc[u].y += v[u].y;
            acc[u].z += v[u].z;
            acc[u].w += v[u].w;
        }
    }
    // leftover whole float4s (fewer than UNROLL per thread)
    for (; i < n4; i += stride) {
        float4 v = x4[i];
        acc[0].x += v.x;
        acc[0].y += v.y;
        acc[0].z += v.z;
        acc[0].w += v.w;
    }
    float sum = 0.f;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) sum += (acc[u].x + acc[u].y) + (acc[u].z + acc[u].w);
    // scalar tail: the last n % 4 elements
    if (gid < n - (n4 << 2)) sum += x[(n4 << 2) + gid];

    sum = block_sum<BLOCK>(sum);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

extern "C" __global__ void __launch_bounds__(FINAL_THREADS)
reduce_vec4_final(const float* __restrict__ partial, float* __restrict__ out, int count) {
    float sum = 0.f;
    for (int i = threadIdx.x; i < count; i += FINAL_THREADS) sum += partial[i];
    sum = block_sum<FINAL_THREADS>(sum);
    if (threadIdx.x == 0) out[0] = sum;
}
