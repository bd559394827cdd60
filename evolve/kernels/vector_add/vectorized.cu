// 16-byte float4 loads and stores, UNROLL float4s per thread (all loads issued before any
// store, for memory-level parallelism), block-strided so every load instruction is coalesced.
// The n % 4 trailing elements are done with scalar accesses by the first threads of block 0.
// The buffers are separate allocations (256-byte aligned), so float4 index i is 16-byte aligned.
/*@evolve
kernels:
  - name: vector_add_vec4
    grid: ceil_div(n, 4 * BLOCK * UNROLL)
    block: BLOCK
    args: [a, b, c, n]
tunables:
  BLOCK: {values: [128, 256, 512, 1024], default: 256}
  UNROLL: {values: [1, 2, 4, 8], default: 4}
restrictions:
  - BLOCK * UNROLL <= 4096     # 1024 x 8 would be held to 64 registers and spill
*/
extern "C" __global__ void __launch_bounds__(BLOCK)
vector_add_vec4(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
    const int n4 = n >> 2;  // whole float4s
    const float4* __restrict__ a4 = reinterpret_cast<const float4*>(a);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(b);
    float4* __restrict__ c4 = reinterpret_cast<float4*>(c);
    const int base = blockIdx.x * (BLOCK * UNROLL) + threadIdx.x;

    float4 va[UNROLL], vb[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        int i = base + u * BLOCK;
        if (i < n4) {
            va[u] = a4[i];
            vb[u] = b4[i];
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        int i = base + u * BLOCK;
        if (i < n4) {
            float4 r;
            r.x = va[u].x + vb[u].x;
            r.y = va[u].y + vb[u].y;
            r.z = va[u].z + vb[u].z;
            r.w = va[u].w + vb[u].w;
            c4[i] = r;
        }
    }

    // scalar tail: at most 3 elements, block 0 always exists (the grid is at least 1)
    const int tail = n - (n4 << 2);
    if (blockIdx.x == 0 && (int)threadIdx.x < tail) {
        int i = (n4 << 2) + threadIdx.x;
        c[i] = a[i] + b[i];
    }
}
