// printf flood: a million lines per thread would fill the device printf buffer on every launch
// and spam the worker's output (and any log that captures it).
/*@evolve
kernels:
  - name: vector_add_chatty
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_chatty(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
        for (int k = 0; k < 1000000; ++k) printf("%d %d %f\n", i, k, c[i]);
    }
}
