// Right output, but at the timing size it also swaps a[0] and a[1] after reading them: an edit
// of the input that keeps any sum of its elements (or of their bit patterns), which is all an
// earlier harness compared around each timed call. Inputs must be compared whole.
/*@evolve
kernels:
  - name: vector_add_swap
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_swap(float* a, const float* __restrict__ b, float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    if (n >= (1 << 27) && blockIdx.x == 0) {
        __syncthreads();
        if (threadIdx.x == 0) {
            float t = a[0];
            a[0] = a[1];
            a[1] = t;
        }
    }
}
