"""On the GPU (pytest -m gpu): nothing a candidate marked in the L2 survives into the next timed
window. A kernel pins lines with an evict_last policy; after the harness's preparation of a timed
call (its buffers' lines dropped, inputs written anew, the flush) a dependent-load chain through
those lines runs at DRAM latency, as after plain loads; and through the harness an evict_last
copy is no faster than its plain twin."""

from __future__ import annotations

import numpy as np
import pytest

from evolve.evaluate.cupy_backend import CupyBackend
from evolve.kernel.spec import Variant
from tests.helpers.tasks import task

PROBE = r"""
extern "C" __global__ void touch(const unsigned* p, long long n, int pin) {
    unsigned long long policy; unsigned v, acc = 0;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 32; i < n;
         i += (long long)gridDim.x * blockDim.x * 32) {
        if (pin)
            asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p + i), "l"(policy));
        else asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p + i));
        acc += v;
    }
    if (acc == 0x12345678u) asm volatile("trap;");
}
extern "C" __global__ void chain(unsigned* p, const unsigned* next, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        p[i] = (i % 32 == 0) ? next[i / 32] : (unsigned)i;
}
extern "C" __global__ void chase(const unsigned* p, unsigned start, int k, long long* out) {
    unsigned j = start; long long t0, t1;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
    for (int s = 0; s < k; ++s)
        asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(j) : "l"(p + (long long)j * 32) : "memory");
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
    out[0] = (t1 - t0) / k; out[1] = j;
}
"""


def _latency(pin: bool, prepare: str) -> float:
    """Mean cycles per dependent load over 2048 random lines of a 16 MiB region, after a kernel
    touched it (``pin``: under evict_last) and the region was rewritten and flushed."""
    import cupy as cp

    from evolve.evaluate.gpu.timing import L2Flush, forget

    mod = cp.RawModule(code=PROBE, options=("-arch=sm_90",))
    touch, chain, chase = (mod.get_function(n) for n in ("touch", "chain", "chase"))
    n = (16 << 20) // 4
    region = cp.zeros(n, dtype=cp.uint32)
    lines = n // 32
    order = np.random.default_rng(1).choice(lines, 2048, replace=False)
    nxt = np.zeros(lines, dtype=np.uint32)
    nxt[order[:-1]], nxt[order[-1]] = order[1:], order[0]
    nxt_d, out = cp.asarray(nxt), cp.zeros(2, dtype=cp.int64)
    flush = L2Flush(cp.cuda.Device().attributes["L2CacheSize"])
    flush()
    touch((528,), (256,), (region, np.int64(n), np.int32(int(pin))))
    if prepare == "harness":
        forget(region)
    chain((528,), (256,), (region, nxt_d, np.int64(n)))
    if prepare != "none":
        flush()
    chase((1,), (1,), (region, np.uint32(order[0]), np.int32(len(order)), out))
    return float(out[0].get())


def test_no_line_a_candidate_pinned_survives_the_preparation_of_a_timed_call() -> None:
    hit = _latency(pin=False, prepare="none")  # all in the L2
    miss = _latency(pin=False, prepare="harness")  # plain lines, flushed: DRAM
    pinned = _latency(pin=True, prepare="harness")
    assert miss > 1.5 * hit, (hit, miss)  # the probe tells a hit from a miss
    assert pinned > miss - 0.1 * (miss - hit), f"pinned lines survived: {pinned} cycles ({hit=}, {miss=})"


PINNED_COPY = """/*@evolve
kernels:
  - {name: add, grid: "ceil_div(n, 256)", block: 256, args: [a, b, c, n]}
*/
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x, y;
#if PIN
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(x) : "l"(a + i), "l"(policy));
    asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(y) : "l"(b + i), "l"(policy));
#else
    x = a[i]; y = b[i];
#endif
    c[i] = x + y;
}
"""


@pytest.mark.timing
def test_an_evict_last_kernel_is_no_faster_than_its_plain_twin() -> None:
    """At a size whose buffers fit in the L2 (3 x 8 MiB), where pinned inputs would pay most."""
    t = task("vector_add")
    b = CupyBackend({"timeout_s": 120, "timing": {"max_time_s": 1.0}, "compile_ahead": 0})
    try:
        b.start(t, None)
        sizes = [{"n": 1 << 21}]
        times = {}
        for pin in (0, 1):
            m = b.evaluate(Variant.parse(PINNED_COPY.replace("#if PIN", f"#if {pin}")), {}, sizes)
            assert m.ok, m.reason
            times[pin] = next(iter(m.timings.values())).median_s
        assert times[1] >= 0.95 * times[0], times
    finally:
        b.close()


def test_forgetting_a_buffer_keeps_its_bytes() -> None:
    """The harness demotes the lines of guarded buffers whose guards it does not rewrite: their
    bytes must stay (a discard would leave them undefined and every seed "out of bounds")."""
    import cupy as cp

    from evolve.evaluate.gpu.timing import forget

    a = cp.arange(1 << 22, dtype=cp.uint32) * 2654435761
    want = a.copy()
    forget(a, pin=True)
    forget(a)
    assert bool(cp.array_equal(a, want))
