// The row sums of tests/torch_problems/row_sum.py: one block per row, a strided loop, a tree in
// shared memory. WRONG=1 drops the last column (the wrong kernel the GPU tests must catch).
/*@evolve
kernels:
  - name: row_sum
    grid: rows
    block: BLOCK
    args: [x, out, rows, cols]
tunables:
  BLOCK: {values: [64, 128, 256], default: 128}
  WRONG: {values: [0, 1], default: 0}
*/
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float s[BLOCK];
    const float* row = x + (long long)blockIdx.x * cols;
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols - WRONG; c += BLOCK) acc += row[c];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
