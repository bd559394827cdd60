// One thread per row: scan the row, keep the first index of the largest value.
/*@evolve
kernels:
  - name: row_argmax
    grid: ceil_div(rows, BLOCK)
    block: BLOCK
    args: [x, idx, rows, cols]
tunables:
  BLOCK: {values: [32, 64, 128, 256], default: 128}
*/
extern "C" __global__ void row_argmax(const float* __restrict__ x, int* __restrict__ idx,
                                      int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (long long)r * cols;
    float best = row[0];
    int at = 0;
    for (int c = 1; c < cols; ++c) {
        if (row[c] > best) { best = row[c]; at = c; }
    }
    idx[r] = at;
}
