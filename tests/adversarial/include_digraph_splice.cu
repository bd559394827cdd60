// Forbidden include in disguise: the "%:" digraph for "#" and a backslash-newline splice inside
// the word "include", with angle brackets. After translation phases 1-2 it is #include </etc/shadow>.
/*@evolve
kernels:
  - name: vector_add_naive
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
%:inc\
lude </etc/shadow>

extern "C" __global__ void vector_add_naive(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
