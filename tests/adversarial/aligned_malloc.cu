// Device heap through another door than malloc: the aligned allocator (the compiled code calls the
// __cuda_syscall_aligned_malloc system call), never freed, so every launch drains the heap that
// later candidates in the same worker share. The check must look at every undefined function of
// the compiled module, not at one name.
/*@evolve
kernels:
  - name: vector_add_aligned_heap
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __device__ void* __nv_aligned_device_malloc(size_t size, size_t align);

extern "C" __global__ void vector_add_aligned_heap(const float* __restrict__ a, const float* __restrict__ b,
                                                   float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    float* leak = (float*)__nv_aligned_device_malloc(1024, 256);
    if (i < n) c[i] = a[i] + b[i] + (leak == (float*)1 ? 1.f : 0.f);
}
