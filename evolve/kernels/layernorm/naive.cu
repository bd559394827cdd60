// One thread per row, three passes over the row (mean, variance around the mean, write):
// simple, correct, and slow (uncoalesced). The mean is summed as x - x[row, 0]: a plain float32
// sum of thousands of values whose mean is 32+ standard deviations from zero (the task's offset
// stress round) loses ~1e-4 of a standard deviation, which the tolerance does not allow.
/*@evolve
kernels:
  - name: layernorm_naive
    grid: ceil_div(rows, BLOCK)
    block: BLOCK
    args: [x, gamma, beta, y, rows, cols]
tunables:
  BLOCK: {values: [32, 64, 128, 256, 512, 1024], default: 256}
*/
extern "C" __global__ void layernorm_naive(const float* __restrict__ x, const float* __restrict__ gamma,
                                           const float* __restrict__ beta, float* __restrict__ y,
                                           int rows, int cols) {
    int r = blockIdx.x * BLOCK + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    const float x0 = xr[0];
    float sum = 0.f;
    for (int c = 0; c < cols; ++c) sum += xr[c] - x0;
    float mean = x0 + sum / cols;
    float sq = 0.f;
    for (int c = 0; c < cols; ++c) {
        float d = xr[c] - mean;
        sq += d * d;
    }
    float rstd = 1.f / sqrtf(sq / cols + EPS);  // EPS comes from the task's defines
    for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
}
