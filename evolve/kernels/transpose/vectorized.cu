// Shared-memory tiled transpose with VEC-wide (8- or 16-byte) global loads and stores: a block
// of (TILE / VEC) x BLOCK_ROWS threads moves a TILE x TILE tile. A thread loads VEC consecutive
// elements of a row of x, and later stores VEC consecutive elements of a row of out, gathered
// from a column of the tile (padded by one column, so the column reads spread over the banks).
// The grid is one-dimensional and ORDER picks which tile each block takes: 0 along the rows of x
// (reads of neighbouring blocks adjacent), 1 along its columns (writes adjacent), 2 diagonally
// (neither, against DRAM partition camping). STORE: 0 plain stores, 1 streaming (evict-first)
// stores, since out is not read again. Edges and widths that are not a multiple of VEC fall back
// to scalar accesses; the buffers are separate allocations (256-byte aligned), so a row start
// that is a multiple of VEC elements is VEC-aligned.
/*@evolve
kernels:
  - name: transpose_vectorized
    grid: ceil_div(cols, TILE) * ceil_div(rows, TILE)
    block: (TILE // VEC) * BLOCK_ROWS
    args: [x, out, rows, cols]
tunables:
  TILE: {values: [32, 64], default: 64}
  BLOCK_ROWS: {values: [2, 4, 8, 16], default: 8}
  VEC: {values: [1, 2, 4], default: 4}
  ORDER: {values: [0, 1, 2], default: 0}
  STORE: {values: [0, 1], default: 0}
restrictions:
  - (TILE // VEC) * BLOCK_ROWS >= 32
*/
#define TPR (TILE / VEC)  // threads along a tile row

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

union Pack {
    vec_t v;
    float f[VEC];
};

extern "C" __global__ void __launch_bounds__(TPR * BLOCK_ROWS)
transpose_vectorized(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    const int tiles_c = (cols + TILE - 1) / TILE, tiles_r = (rows + TILE - 1) / TILE;
    const int b = blockIdx.x;
#if ORDER == 0
    const int bc = b % tiles_c, br = b / tiles_c;
#elif ORDER == 1
    const int br = b % tiles_r, bc = b / tiles_r;
#else
    const int br = b % tiles_r, bc = (b / tiles_r + br) % tiles_c;  // a bijection for any shape
#endif
    const int tx = threadIdx.x % TPR, ty = threadIdx.x / TPR;
    const int r0 = br * TILE, c0 = bc * TILE;  // first row and column of x in this tile

    const int c = c0 + tx * VEC;
    const bool whole_in = cols % VEC == 0 && c + VEC <= cols;
#pragma unroll
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int r = r0 + ty + j;
        if (r < rows) {
            Pack p;
            if (whole_in) {
                p.v = *reinterpret_cast<const vec_t*>(x + (size_t)r * cols + c);
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) p.f[i] = c + i < cols ? x[(size_t)r * cols + c + i] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < VEC; ++i) tile[ty + j][tx * VEC + i] = p.f[i];
        }
    }
    __syncthreads();

    const int oc = r0 + tx * VEC;  // column of out = row of x
    const bool whole_out = rows % VEC == 0 && oc + VEC <= rows;
#pragma unroll
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int orow = c0 + ty + j;  // row of out = column of x
        if (orow < cols) {
            Pack p;
#pragma unroll
            for (int i = 0; i < VEC; ++i) p.f[i] = tile[tx * VEC + i][ty + j];
            float* dst = out + (size_t)orow * rows + oc;
            if (whole_out) {
                if (STORE) __stcs(reinterpret_cast<vec_t*>(dst), p.v);
                else *reinterpret_cast<vec_t*>(dst) = p.v;
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    if (oc + i < rows) {
                        if (STORE) __stcs(dst + i, p.f[i]);
                        else dst[i] = p.f[i];
                    }
                }
            }
        }
    }
}
