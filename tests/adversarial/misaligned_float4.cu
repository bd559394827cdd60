// float4 (16-byte) loads from a + 1, an address 4 bytes past a 16-byte boundary: the vector load
// faults with a misaligned address and poisons the context. (Buffers from the harness are at
// least 256-byte aligned, so a + 1 is never 16-byte aligned.)
/*@evolve
kernels:
  - name: vector_add_misaligned
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_misaligned(const float* __restrict__ a, const float* __restrict__ b,
                                                 float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        float4 shifted = reinterpret_cast<const float4*>(a + 1)[i / 4];
        c[i] = a[i] + b[i] + 0.0f * (shifted.x + shifted.y + shifted.z + shifted.w);
    }
}
