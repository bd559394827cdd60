// 48 KiB of static __shared__ memory plus 200 KiB of dynamic: each under the H200's 227 KiB per
// block, together over it. A plan that checks only the dynamic part lets the driver's refusal
// (raised while setting the kernel's attribute) escape the evaluation.
/*@evolve
kernels:
  - name: vector_add_shared
    grid: ceil_div(n, 256)
    block: 256
    shared: 204800
    args: [a, b, c, n]
*/
extern "C" __global__ void vector_add_shared(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    __shared__ float fixed[12288];
    extern __shared__ float dynamic[];
    int i = blockIdx.x * 256 + threadIdx.x;
    fixed[threadIdx.x] = 0.f;
    dynamic[threadIdx.x] = 0.f;
    __syncthreads();
    if (i < n) c[i] = a[i] + b[i] + fixed[threadIdx.x] + dynamic[threadIdx.x];
}
