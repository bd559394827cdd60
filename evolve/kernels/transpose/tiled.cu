// Shared-memory tiled transpose: a block of TILE x BLOCK_ROWS threads moves a TILE x TILE tile,
// each thread TILE / BLOCK_ROWS elements. Both the global reads (along rows of x) and the
// global writes (along rows of out) are coalesced; the tile is padded by one column so that
// reading it column-wise hits 32 different banks. Every access is bounds-checked, so partial
// edge tiles are fine.
/*@evolve
kernels:
  - name: transpose_tiled
    grid: ["ceil_div(cols, TILE)", "ceil_div(rows, TILE)"]
    block: [TILE, BLOCK_ROWS]
    args: [x, out, rows, cols]
tunables:
  TILE: {values: [16, 32, 64], default: 32}
  BLOCK_ROWS: {values: [1, 2, 4, 8, 16], default: 8}
restrictions:
  - TILE * BLOCK_ROWS >= 32
  - BLOCK_ROWS <= TILE
*/
extern "C" __global__ void __launch_bounds__(TILE * BLOCK_ROWS)
transpose_tiled(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = blockIdx.x * TILE;  // first column of x in this tile
    const int r0 = blockIdx.y * TILE;  // first row of x in this tile

    const int c = c0 + tx;
#pragma unroll
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        int r = r0 + ty + j;
        if (r < rows && c < cols) tile[ty + j][tx] = x[(size_t)r * cols + c];
    }
    __syncthreads();

    const int oc = r0 + tx;  // column of out = row of x
#pragma unroll
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        int orow = c0 + ty + j;  // row of out = column of x
        if (orow < cols && oc < rows) out[(size_t)orow * rows + oc] = tile[tx][ty + j];
    }
}
