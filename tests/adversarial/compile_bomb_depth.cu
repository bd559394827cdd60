// Compile bomb, fast-failing kind: a template recursing 10^8 levels deep. NVRTC stops it at its
// instantiation-depth limit (about 200) within a second: "excessive recursion at instantiation".
/*@evolve
kernels:
  - name: vector_add_bomb
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
template <unsigned long long N> struct Bomb {
    static constexpr unsigned long long value = Bomb<N - 1>::value + 1;
};
template <> struct Bomb<0> {
    static constexpr unsigned long long value = 0;
};

extern "C" __global__ void vector_add_bomb(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + (float)(Bomb<100000000ull>::value & 0);
}
