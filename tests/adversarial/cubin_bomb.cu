// Two kilobytes of source, 32 MiB of compiled module: an initialized __device__ array is stored
// in the cubin. Bigger ones fill the worker's memory and the cubin cache on disk.
/*@evolve
kernels:
  - name: vector_add_blob
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
__device__ unsigned char blob[1 << 25] = {1};

extern "C" __global__ void vector_add_blob(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + 0.f * blob[i & ((1 << 25) - 1)];
}
