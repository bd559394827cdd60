// One thread per value, one global atomic per value.
/*@evolve
kernels:
  - name: histogram
    grid: ceil_div(n, BLOCK)
    block: BLOCK
    args: [values, counts, n]
tunables:
  BLOCK: {values: [128, 256, 512, 1024], default: 256}
*/
extern "C" __global__ void histogram(const int* __restrict__ values, int* __restrict__ counts, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) atomicAdd(&counts[values[i]], 1);
}
