// Transpose through a 32 x 32 shared-memory tile: a block of 32 x TILE_ROWS threads reads a tile
// of x row by row (coalesced), then writes it to out row by row (coalesced), each thread
// 32 / TILE_ROWS elements each way. The tile is not padded, so reading one of its columns puts
// all 32 lanes of a warp on the same shared-memory bank (a 32-way conflict).
/*@evolve
kernels:
  - name: transpose_smem_tile
    grid: ["ceil_div(cols, 32)", "ceil_div(rows, 32)"]
    block: [32, TILE_ROWS]
    args: [x, out, rows, cols]
tunables:
  TILE_ROWS: {values: [2, 4, 8, 16, 32], default: 8}
*/
extern "C" __global__ void __launch_bounds__(32 * TILE_ROWS)
transpose_smem_tile(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[32][32];
    const int row0 = blockIdx.y * 32;  // first row of x in this tile
    const int col0 = blockIdx.x * 32;  // first column of x in this tile

    const int col = col0 + threadIdx.x;
    for (int k = threadIdx.y; k < 32; k += TILE_ROWS) {
        const int row = row0 + k;
        if (row < rows && col < cols) tile[k][threadIdx.x] = x[(size_t)row * cols + col];
    }
    __syncthreads();

    const int ocol = row0 + threadIdx.x;  // column of out = row of x
    for (int k = threadIdx.y; k < 32; k += TILE_ROWS) {
        const int orow = col0 + k;  // row of out = column of x
        if (orow < cols && ocol < rows) out[(size_t)orow * rows + ocol] = tile[threadIdx.x][k];
    }
}
