// Correct output, but also writes the sum back into the input a (casting away const).
/*@evolve
kernels:
  - name: vector_add_clobber
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_clobber(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        float s = a[i] + b[i];
        c[i] = s;
        const_cast<float*>(a)[i] = s;
    }
}
