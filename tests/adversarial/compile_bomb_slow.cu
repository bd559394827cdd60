// Compile bomb, slow kind, flat memory: a chain of 190 template instantiations, each holding two
// constexpr evaluations of 600k xorshift steps (each just under NVRTC's per-evaluation constexpr
// complexity limit, ~0.6 s each on a 2-core dev box). No single step is refused; the whole
// front end takes minutes (200 s, 141 MB peak, on a 2-core dev box with NVRTC 13.0) and then
// succeeds, so only the compile time limit (60 s) stops it.
/*@evolve
kernels:
  - name: vector_add_slow_compile
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
#define CHAIN 190

__device__ constexpr unsigned long long spin(unsigned long long seed) {
    unsigned long long x = seed | 1;
    for (int k = 0; k < 600000; ++k) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

template <int K> struct Slow {
    static constexpr unsigned long long first = spin(Slow<K - 1>::value + K);
    static constexpr unsigned long long value = spin(first);
};
template <> struct Slow<0> {
    static constexpr unsigned long long value = 1;
};

extern "C" __global__ void vector_add_slow_compile(const float* __restrict__ a, const float* __restrict__ b,
                                                   float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + (float)(Slow<CHAIN>::value & 0);
}
