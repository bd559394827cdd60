// One thread per element of x: reads are coalesced along a row of x, writes are strided by
// rows (uncoalesced). Simple and correct.
/*@evolve
kernels:
  - name: transpose_naive
    grid: ["ceil_div(cols, BX)", "ceil_div(rows, BY)"]
    block: [BX, BY]
    args: [x, out, rows, cols]
tunables:
  BX: {values: [16, 32, 64], default: 32}
  BY: {values: [1, 2, 4, 8, 16], default: 8}
restrictions:
  - BX * BY >= 64
*/
extern "C" __global__ void transpose_naive(const float* __restrict__ x, float* __restrict__ out,
                                           int rows, int cols) {
    int c = blockIdx.x * BX + threadIdx.x;  // column of x = row of out
    int r = blockIdx.y * BY + threadIdx.y;  // row of x = column of out
    if (r < rows && c < cols) out[(size_t)c * rows + r] = x[(size_t)r * cols + c];
}
