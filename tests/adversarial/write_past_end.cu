// Correct output plus one store one element past the end of c (a finite value, not NaN).
// Without guard zones the store lands in the allocator's rounding slack and goes unseen.
/*@evolve
kernels:
  - name: vector_add_write_oob
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_write_oob(const float* __restrict__ a, const float* __restrict__ b,
                                                float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        float s = a[i] + b[i];
        c[i] = s;
        if (i == n - 1) c[n] = s;  // off by one
    }
}
