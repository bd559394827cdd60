// Asks the harness for a 4 TiB scratch buffer (2^40 float32 elements): an allocation that would
// fail or exhaust the device before anything runs.
/*@evolve
kernels:
  - name: vector_add_scratch_hog
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, hog, n]
scratch:
  hog: {dtype: float32, size: 1099511627776}
*/
extern "C" __global__ void vector_add_scratch_hog(const float* __restrict__ a, const float* __restrict__ b,
                                                  float* __restrict__ c, float* hog, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
