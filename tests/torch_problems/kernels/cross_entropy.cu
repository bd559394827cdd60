// The mean cross-entropy of tests/torch_problems/cross_entropy.py (a 0-d output): one block, each
// thread a strided set of rows (log-sum-exp less the target's logit), a tree in shared memory.
/*@evolve
kernels:
  - name: cross_entropy
    grid: 1
    block: BLOCK
    args: [logits, targets, out, batch, classes]
tunables:
  BLOCK: {values: [128, 256, 512], default: 256}
*/
extern "C" __global__ void cross_entropy(const float* __restrict__ logits, const long long* __restrict__ targets,
                                         float* __restrict__ out, int batch, int classes) {
    __shared__ float s[BLOCK];
    float acc = 0.f;
    for (int r = threadIdx.x; r < batch; r += BLOCK) {
        const float* row = logits + (long long)r * classes;
        float m = __int_as_float(0xff800000);  // -inf
        for (int c = 0; c < classes; ++c) m = fmaxf(m, row[c]);
        float sum = 0.f;
        for (int c = 0; c < classes; ++c) sum += expf(row[c] - m);
        acc += m + logf(sum) - row[targets[r]];
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0] / batch;
}
