"""Kernels that use what the harness makes for Hopper code: TMA tensor maps (passed by value as
``const __grid_constant__`` parameters) and thread-block clusters. Compiled on the CPU by the
parameter-layout tests and run on the GPU by tests/test_gpu_tma.py, over the task in tma_task/
(out = x, float32, at sizes whose tiles are ragged on both axes).
"""

from __future__ import annotations

from pathlib import Path

TASK_FILE = Path(__file__).parents[1] / "tma_task" / "tile_copy.yaml"

# What every kernel here shares: the map type (no header needed), an mbarrier wait, a 2D TMA load.
_COMMON = r"""
struct alignas(64) TensorMap { unsigned long long bits[16]; };

__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}
// one thread: load the box at (x0, y0) (innermost first) into shared memory, completing on bar
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap* map, int x0, int y0,
                                         unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(map), "r"(x0), "r"(y0), "r"(bar) : "memory");
}
// one thread: store the box at (x0, y0) from shared memory; TMA clips it to the map's extents
__device__ __forceinline__ void tma_store(const TensorMap* map, int x0, int y0, unsigned src) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(x0), "r"(y0), "r"(src) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // written, not only read
}
// dynamic shared memory from its first 1024-byte boundary (a whole 128-byte swizzle pattern;
// TMA itself wants 128)
__device__ __forceinline__ float* aligned_smem() {
    extern __shared__ unsigned char smem[];
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    return (float*)(smem + ((1024u - s % 1024u) % 1024u));
}
"""

# (a) A box of x into shared memory by TMA (SW = 128: in the 128-byte swizzle, which the threads
# undo), written out by the threads. Boxes at the right and
# bottom edges are partial: TMA zero-fills what lies outside x, and the kernel checks that it did
# (a non-zero fill poisons the block's first output element, so the evaluator sees a wrong
# answer). With CLUSTER > 1 the grid is rounded up to whole clusters: the extra blocks' boxes
# lie wholly outside x, read as zeros and write nothing.
TILE_COPY = r"""/*@evolve
tensor_maps:
  - {name: x_map, buffer: x, box: [BX, BY], swizzle: SW, when: "cols % 4 == 0"}
kernels:
  - name: tile_copy
    grid: ["CLUSTER * ceil_div(cols, BX * CLUSTER)", "ceil_div(rows, BY)"]
    block: 128
    shared: BX * BY * 4 + 1024
    cluster: [CLUSTER, 1, 1]
    args: [x_map, x, out, rows, cols]
tunables:
  BX: {values: [4, 32, 64], default: 32}
  BY: {values: [8, 16, 256], default: 16}
  CLUSTER: {values: [1, 2], default: 1}
  SW: {values: [0, 128], default: 0}
restrictions:
  - SW == 0 or BX == 32       # 128-byte swizzle: box rows of exactly 128 bytes
*/
""" + _COMMON + r"""
extern "C" __global__ void tile_copy(const __grid_constant__ TensorMap x_map, const float* x, float* out,
                                     int rows, int cols) {
    float* tile = aligned_smem();
    __shared__ __align__(8) unsigned long long bar;
    const int x0 = blockIdx.x * BX, y0 = blockIdx.y * BY;
    if (cols % 4 != 0) {  // no map at these sizes (rows not 16-byte multiples): plain loads
        for (int i = threadIdx.x; i < BX * BY; i += blockDim.x) {
            int r = y0 + i / BX, c = x0 + i % BX;
            if (r < rows && c < cols) out[(long long)r * cols + c] = x[(long long)r * cols + c];
        }
        return;
    }
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) bar_init(b, 1);
    __syncthreads();
    if (threadIdx.x == 0) tma_load((unsigned)__cvta_generic_to_shared(tile), &x_map, x0, y0, b, BX * BY * 4);
    bar_wait(b, 0);
    bool zero_filled = true;
    for (int i = threadIdx.x; i < BX * BY; i += blockDim.x) {
        int r = y0 + i / BX, c = x0 + i % BX;
        // 128-byte swizzle: 16-byte chunk j of box row k is stored at chunk j ^ (k % 8)
        int at = SW ? (i / BX) * BX + ((((i % BX) / 4) ^ ((i / BX) % 8)) * 4) + i % 4 : i;
        if (r < rows && c < cols) out[(long long)r * cols + c] = tile[at];
        else if (tile[at] != 0.f) zero_filled = false;
    }
    if (!__syncthreads_and(zero_filled) && threadIdx.x == 0 && y0 < rows && x0 < cols)
        out[(long long)y0 * cols + x0] = __int_as_float(0x7fc00000);
}
"""

# (c) Every block copies its box of x to out through a TMA load and a TMA store (partial at the
# right and bottom edges: the zero-filled part must be clipped), loads boxes of x from wholly
# outside it (they must read as zeros) and stores boxes of junk wholly outside out. TMA clips the
# stores and zero-fills the loads, so the result is the copy and the guard zones stay intact.
TMA_OUTSIDE = r"""/*@evolve
tensor_maps:
  - {name: x_map, buffer: x, box: [BX, BY]}
  - {name: out_map, buffer: out, box: [BX, BY]}
kernels:
  - name: tma_outside
    grid: ["ceil_div(cols, BX)", "ceil_div(rows, BY)"]
    block: 128
    shared: 2 * BX * BY * 4 + 1024
    args: [x_map, out_map, rows, cols]
tunables:
  BX: {values: [32], default: 32}
  BY: {values: [8], default: 8}
*/
""" + _COMMON + r"""
extern "C" __global__ void tma_outside(const __grid_constant__ TensorMap x_map,
                                       const __grid_constant__ TensorMap out_map, int rows, int cols) {
    float* tile = aligned_smem();
    float* junk = tile + BX * BY;
    __shared__ __align__(8) unsigned long long bar;
    const int x0 = blockIdx.x * BX, y0 = blockIdx.y * BY;
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned t = (unsigned)__cvta_generic_to_shared(tile), j = (unsigned)__cvta_generic_to_shared(junk);
    if (threadIdx.x == 0) bar_init(b, 1);
    __syncthreads();
    if (threadIdx.x == 0) tma_load(t, &x_map, x0, y0, b, BX * BY * 4);
    bar_wait(b, 0);
    __syncthreads();  // every thread past phase 0 before the barrier is armed again
    // boxes of x outside it: every element must read as zero
    const int outside[4][2] = {{-BX, -BY}, {cols, y0}, {x0, rows}, {cols + 1000, rows + 1000}};
    bool zeros = true;
    for (int k = 0; k < 4; ++k) {
        if (threadIdx.x == 0) tma_load(j, &x_map, outside[k][0], outside[k][1], b, BX * BY * 4);
        bar_wait(b, (k + 1) & 1);
        for (int i = threadIdx.x; i < BX * BY; i += blockDim.x) zeros = zeros && junk[i] == 0.f;
        __syncthreads();
    }
    zeros = __syncthreads_and(zeros);
    if (!zeros && threadIdx.x == 0) tile[0] = __int_as_float(0x7fc00000);
    for (int i = threadIdx.x; i < BX * BY; i += blockDim.x) junk[i] = -12345.f;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> TMA's reads
    __syncthreads();
    if (threadIdx.x == 0) {
        tma_store(&out_map, x0, y0, t);
        // junk wholly outside out: past its last column (the next row's start, were it not
        // clipped), past its last row (the guard zone), far away. (A box at negative coordinates
        // is not clipped: on the H200 it stops the kernel with an illegal instruction.)
        tma_store(&out_map, cols, y0, j);
        tma_store(&out_map, x0, rows, j);
        tma_store(&out_map, cols + 1000, rows + 1000, j);
    }
}
"""

# (b) Each block writes what it sees of its cluster: out[block] = rank in the cluster +
# 16 * cluster size + 256 * the cluster's index along x + 4096 * the number of clusters along x.
# Launched directly (not judged).
CLUSTER_IDS = r"""/*@evolve
kernels:
  - {name: cluster_ids, grid: [8, 1, 1], block: 32, cluster: [CX, 1, 1], args: [out]}
tunables:
  CX: {values: [1, 2, 4, 8], default: 2}
*/
extern "C" __global__ void cluster_ids(float* out) {
    unsigned rank, size, id, dim;  // dim: clusters along x
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
    asm("mov.u32 %0, %%clusterid.x;" : "=r"(id));
    asm("mov.u32 %0, %%nclusterid.x;" : "=r"(dim));
    if (threadIdx.x == 0) out[blockIdx.x] = (float)(rank + 16 * size + 256 * id + 4096 * dim);
}
"""
