// printf without the word printf: the name is glued together by the preprocessor (a ## b), so
// a regular expression over the source never sees it, yet NVRTC compiles a call to vprintf.
/*@evolve
kernels:
  - name: vector_add_pasted
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
#define GLUE(x, y) x##y
#define SAY GLUE(pri, ntf)

extern "C" __global__ void vector_add_pasted(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
        for (int k = 0; k < 1000000; ++k) SAY("%d %d\n", i, k);
    }
}
