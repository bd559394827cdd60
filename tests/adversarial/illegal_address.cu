// Computes the right answer, then thread 0 stores through a wild pointer (address 16, the null
// page): an illegal memory access that poisons the context.
/*@evolve
kernels:
  - name: vector_add_wild
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_wild(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    if (i == 0) *reinterpret_cast<volatile float*>(static_cast<unsigned long long>(16)) = c[0];
}
