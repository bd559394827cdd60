// The row maxima and where they are, of tests/torch_problems/row_max.py (two outputs: float32 values,
// int64 indices): one block per row, the first index of the largest value (a NaN counts as largest,
// as in torch.max), a tree in shared memory.
/*@evolve
kernels:
  - name: row_max
    grid: rows
    block: BLOCK
    args: [x, out0, out1, rows, cols]
tunables:
  BLOCK: {values: [64, 128, 256], default: 128}
*/
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) {
    const bool vn = v != v, bn = bv != bv;
    if (vn != bn) return vn;
    if (vn || v == bv) return i < bi;
    return v > bv;
}

extern "C" __global__ void row_max(const float* __restrict__ x, float* __restrict__ out0,
                                   long long* __restrict__ out1, int rows, int cols) {
    __shared__ float sv[BLOCK];
    __shared__ int si[BLOCK];
    const float* row = x + (long long)blockIdx.x * cols;
    float bv = __int_as_float(0xff800000);  // -inf
    int bi = 0x7fffffff;
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        if (beats(row[c], c, bv, bi)) bv = row[c], bi = c;
    sv[threadIdx.x] = bv, si[threadIdx.x] = bi;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride && beats(sv[threadIdx.x + stride], si[threadIdx.x + stride], sv[threadIdx.x],
                                          si[threadIdx.x]))
            sv[threadIdx.x] = sv[threadIdx.x + stride], si[threadIdx.x] = si[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out0[blockIdx.x] = sv[0], out1[blockIdx.x] = si[0];
}
