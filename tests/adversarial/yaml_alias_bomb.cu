// Malformed launch spec: a "billion laughs" YAML alias bomb (9^6 = 531441 leaves, more with each
// level) meant to exhaust the parser's memory and time when the spec is loaded.
/*@evolve
l0: &l0 [x, x, x, x, x, x, x, x, x]
l1: &l1 [*l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0]
l2: &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1]
l3: &l3 [*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]
l4: &l4 [*l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3]
l5: &l5 [*l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4]
kernels:
  - name: vector_add_naive
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
tunables:
  BLOCK: {values: [256], default: 256}
restrictions: [*l5]
*/
extern "C" __global__ void vector_add_naive(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
