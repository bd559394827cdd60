// cuda-evolve: best kernel of run rm-transpose, task transpose, on NVIDIA H200.
// 0.5429 ms: 3956 GB/s = 87.9% of the measured 4500 GB/s bandwidth ceiling (87.9% of the roofline).
// Tunables and the task's defines are baked in as #defines below: it compiles on its own.
// best.py beside it launches it on CuPy arrays or PyTorch tensors.
// Launch at rows=16384,cols=16384:
//   transpose_tiled<<<(65536, 1, 1), (64, 4, 1), 0>>>(x, out, 16384, 16384)
#define BY 4
#define CS 0
#define GY 16
#define TILE 64
// Tiled transpose through shared memory: a TILE x TILE tile of x is loaded with coalesced
// reads (along rows of x), then written with coalesced writes (along rows of out).
// The +1 padding removes shared-memory bank conflicts on the transposed read.
// Blocks are linearized and grouped: consecutive blocks walk GY tiles down a tile-column
// before moving right, so the blocks in flight cover a compact region of both x and out
// (better DRAM page / L2 locality for the strided side). Optional streaming cache hints.
/*@evolve
kernels:
  - name: transpose_tiled
    grid: "ceil_div(cols, TILE) * ceil_div(rows, TILE)"
    block: [TILE, BY]
    shared: 0
    args: [x, out, rows, cols]
tunables:
  TILE: {values: [32, 64], default: 64}
  BY: {values: [4, 8, 16], default: 4}
  GY: {values: [1, 4, 8, 16, 32], default: 8}
  CS: {values: [0, 1], default: 0}
restrictions:
  - TILE % BY == 0
  - TILE * BY <= 1024
*/

__device__ __forceinline__ float ld_in(const float* p) {
#if CS
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}

__device__ __forceinline__ void st_out(float* p, float v) {
#if CS
    __stcs(p, v);
#else
    *p = v;
#endif
}

extern "C" __global__ void __launch_bounds__(TILE * BY)
transpose_tiled(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];

    // Grouped block ordering (GY tile-rows per group, column-major inside the group).
    const int ntx = (cols + TILE - 1) / TILE;
    const int nty = (rows + TILE - 1) / TILE;
    const int lin = blockIdx.x;
    const int per_group = GY * ntx;
    const int g = lin / per_group;
    const int first = g * GY;
    const int gsize = min(nty - first, GY);
    const int in_g = lin - g * per_group;
    const int tyi = first + in_g % gsize;
    const int txi = in_g / gsize;

    const int bx = txi * TILE;  // first column of x in this tile
    const int by = tyi * TILE;  // first row of x in this tile
    const int tx = threadIdx.x, ty = threadIdx.y;

    // Load: issue all global loads of this thread first, then stage into shared memory.
    const int c = bx + tx;
    float v[TILE / BY];
#pragma unroll
    for (int k = 0; k < TILE / BY; ++k) {
        const int r = by + ty + k * BY;
        v[k] = (r < rows && c < cols) ? ld_in(&x[(size_t)r * cols + c]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < TILE / BY; ++k) tile[ty + k * BY][tx] = v[k];
    __syncthreads();

    // Store: row of out = column of x, column of out = row of x.
    const int oc = by + tx;
    if (oc < rows) {
#pragma unroll
        for (int k = 0; k < TILE / BY; ++k) {
            const int orow = bx + ty + k * BY;
            if (orow < cols) st_out(&out[(size_t)orow * rows + oc], tile[tx][ty + k * BY]);
        }
    }
}
