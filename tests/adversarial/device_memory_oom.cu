// 100 GiB of __device__ memory: loading the module takes most of the GPU, and the harness's own
// allocations then fail (an earlier worker raised OutOfMemoryError out of the evaluation, which
// stopped the run; a resume retried the candidate and stopped again).
/*@evolve
kernels:
  - name: vector_add_hog
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
__device__ float hog[100ULL << 28];

extern "C" __global__ void vector_add_hog(const float* __restrict__ a, const float* __restrict__ b,
                                          float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + 0.f * hog[i];
}
