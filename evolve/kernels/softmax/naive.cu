// One thread per row, three passes over the row: simple, correct, and slow (uncoalesced).
/*@evolve
kernels:
  - name: softmax_naive
    grid: ceil_div(rows, BLOCK)
    block: BLOCK
    args: [x, y, rows, cols]
tunables:
  BLOCK: {values: [32, 64, 128, 256, 512, 1024], default: 256}
*/
extern "C" __global__ void softmax_naive(const float* __restrict__ x, float* __restrict__ y,
                                         int rows, int cols) {
    int r = blockIdx.x * BLOCK + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float m = __int_as_float(0xff800000);  // -inf (NVRTC has no math.h)
    for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    float s = 0.f;
    for (int c = 0; c < cols; ++c) s += expf(xr[c] - m);
    float inv = 1.f / s;
    for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) * inv;
}
