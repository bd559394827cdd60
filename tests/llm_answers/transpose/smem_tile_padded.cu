// Transpose through a padded shared-memory tile of TILE x (TILE + 1) floats. A block has one warp
// per tile row in flight (32 x BLOCK_ROWS threads); a warp covers TILE / 32 column strips, so each
// thread moves (TILE / 32) * (TILE / BLOCK_ROWS) elements each way, with global reads along rows
// of x and global writes along rows of out, both coalesced. The row stride TILE + 1 is 1 modulo
// 32, so a warp reading a column of the tile touches 32 different banks. Edge tiles clip to h x w.
/*@evolve
kernels:
  - name: transpose_smem_padded
    grid: ["ceil_div(cols, TILE)", "ceil_div(rows, TILE)"]
    block: [32, BLOCK_ROWS]
    args: [x, out, rows, cols]
tunables:
  TILE: {values: [32, 64], default: 32}
  BLOCK_ROWS: {values: [4, 8, 16, 32], default: 8}
*/
#define STRIDE (TILE + 1)               // padded row length of the tile
#define STRIPS (TILE / 32)              // 32-wide column strips per tile
#define STEPS (TILE / BLOCK_ROWS)       // tile rows each thread visits

extern "C" __global__ void __launch_bounds__(32 * BLOCK_ROWS)
transpose_smem_padded(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float buf[TILE * STRIDE];
    const int lane = threadIdx.x, wy = threadIdx.y;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    const int h = min(TILE, rows - r0);  // rows of x in this tile
    const int w = min(TILE, cols - c0);  // columns of x in this tile

    const float* __restrict__ src = x + (size_t)r0 * cols + c0;
#pragma unroll
    for (int a = 0; a < STEPS; ++a) {
        const int i = wy + a * BLOCK_ROWS;  // tile row = row of x
#pragma unroll
        for (int b = 0; b < STRIPS; ++b) {
            const int j = lane + 32 * b;    // tile column = column of x
            if (i < h && j < w) buf[i * STRIDE + j] = src[(size_t)i * cols + j];
        }
    }
    __syncthreads();

    float* __restrict__ dst = out + (size_t)c0 * rows + r0;
#pragma unroll
    for (int a = 0; a < STEPS; ++a) {
        const int j = wy + a * BLOCK_ROWS;  // row of out = column of x
#pragma unroll
        for (int b = 0; b < STRIPS; ++b) {
            const int i = lane + 32 * b;    // column of out = row of x
            if (j < w && i < h) dst[(size_t)j * rows + i] = buf[i * STRIDE + j];
        }
    }
}
