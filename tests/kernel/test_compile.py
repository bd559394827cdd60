"""Every seed compiles with NVRTC for the H200 (sm_90, or sm_90a where its spec asks: no GPU needed);
the include allow-list holds."""

import os
import random

import pytest

from evolve.kernel.compiler import (
    CompileError,
    SourceRejected,
    check_source,
    compile_cuda,
    sanitize,
    target_arch,
)
from evolve.kernel.cubin import inspect
from evolve.paths import KERNELS_DIR
from tests.helpers.tasks import TASKS, nvrtc_or_skip, task


@pytest.mark.parametrize("name", TASKS)
def test_every_seed_compiles_for_sm90(name: str) -> None:
    nvrtc_or_skip()
    t = task(name)
    rng = random.Random(0)
    for v in t.seeds():
        space = v.spec.space()
        sample = {tuple(v.spec.default.items()), tuple(space[0].items()), tuple(space[-1].items())}
        sample |= {tuple(c.items()) for c in rng.sample(space, min(2, len(space)))}
        for cfg in sample:
            arch = target_arch("sm_90", v.spec.arch_specific)  # as the evaluator compiles it
            c = compile_cuda(v.source, {**dict(cfg), **dict(t.defines)}, arch, cache=False)
            assert c.cubin[:4] == b"\x7fELF", f"{v.name} {cfg}: not a cubin"


def test_compile_errors_carry_a_sanitized_log() -> None:
    nvrtc_or_skip()
    with pytest.raises(CompileError) as err:
        compile_cuda('extern "C" __global__ void k() { undeclared_thing = 1; }', {}, "sm_90", cache=False)
    assert "undeclared_thing" in str(err.value) and "error" in str(err.value)


def test_cuda_headers_are_allowed_and_compile() -> None:
    nvrtc_or_skip()
    src = '#include <cuda_fp16.h>\nextern "C" __global__ void k(__half* x) { x[0] = __float2half(1.f); }'
    assert compile_cuda(src, {}, "sm_90", cache=False).cubin


def test_hopper_code_can_use_libcuxx_barriers_and_ptx_wrappers() -> None:
    """What a TMA/wgmma kernel includes (issue 16): libcu++'s mbarrier and PTX wrappers and the
    WMMA header compile for sm_90a where CUDA's CCCL headers are installed."""
    nvrtc_or_skip()
    from evolve.kernel.compiler import _cuda_include_dirs

    if not any(d.rstrip("/").endswith("cccl") for d in _cuda_include_dirs()):
        pytest.skip("no CCCL headers here")
    src = """#include <cuda/barrier>
#include <cuda/ptx>
#include <mma.h>
extern "C" __global__ void k(float* x) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
    bar.arrive_and_wait();
    x[threadIdx.x] = 1.f;
}"""
    assert check_source(src) is None
    # cuda::barrier's wait backs off on %globaltimer: a kernel may not read the clock (issue 24.4),
    # so its waits are refused with that reason; the mbarrier PTX wrappers compile
    with pytest.raises(SourceRejected, match="reading the clock"):
        compile_cuda(src, {}, "sm_90a", cache=False)
    assert compile_cuda(src.replace("bar.arrive_and_wait();", "(void)bar.arrive();"), {}, "sm_90a",
                        cache=False).cubin


def test_prompts_list_only_headers_this_nvrtc_compiles(tmp_path, monkeypatch) -> None:
    """A header the allow-list admits may be missing where NVRTC runs (stdint.h on the H200
    machine): the system prompt names only those that compile there."""
    nvrtc_or_skip()
    from evolve.evolution.prompts import Prompts
    from evolve.hardware import named
    from evolve.kernel.compiler import ALLOWED_INCLUDES, available_includes
    from tests.helpers.tasks import hardware_config, task

    monkeypatch.setattr("evolve.kernel.compiler.CACHE_DIR", tmp_path / "cubin")
    monkeypatch.setattr("evolve.kernel.compiler.ALLOWED_INCLUDES",
                        ALLOWED_INCLUDES | {"cuda/no_such_header.h"})
    found = available_includes("sm_90")
    assert "cuda_fp16.h" in found and "cuda/no_such_header.h" not in found
    assert set(found) <= ALLOWED_INCLUDES
    assert available_includes("sm_90") == found and list(tmp_path.glob("includes-*.json"))  # cached
    system = Prompts(task("softmax"), named(hardware_config("h200")))._system()["content"]
    listed = system.split("may be included (")[1].split(")")[0].split(", ")
    assert listed == list(found)


def test_cache_returns_the_same_cubin(tmp_path, monkeypatch) -> None:
    nvrtc_or_skip()
    monkeypatch.setattr("evolve.kernel.compiler.CACHE_DIR", tmp_path)
    src = 'extern "C" __global__ void k(float* x) { x[0] = BLOCK; }'
    first = compile_cuda(src, {"BLOCK": 3}, "sm_90")
    second = compile_cuda(src, {"BLOCK": 3}, "sm_90")
    assert not first.cached and second.cached and first.cubin == second.cubin
    assert not compile_cuda(src, {"BLOCK": 4}, "sm_90").cached


@pytest.mark.parametrize("source", [
    '#include "/etc/passwd"',
    "#include </etc/passwd>",
    "#include <../../etc/passwd>",
    '  #  include "kernel_helpers.h"',
    "%:include </etc/passwd>",
    "#inc\\\nlude </etc/passwd>",
    "#define P </etc/passwd>\n#include P",
    "#include_next <stdio.h>",
    "#embed </etc/passwd>",
    "#if __has_include(</etc/passwd>)\n#endif",
    "#include <stdio.h>",
])
def test_forbidden_includes_are_refused_before_compiling(source: str) -> None:
    assert check_source(source) is not None
    with pytest.raises(CompileError, match="not allowed"):
        compile_cuda(source + '\nextern "C" __global__ void k() {}', {}, "sm_90", cache=False)


def test_allowed_includes_pass_the_check() -> None:
    assert check_source("#include <cuda_fp16.h>\n#include <cstdint> // ints\n#pragma unroll") is None


@pytest.mark.parametrize("source", [
    'extern "C" __global__ void k() { printf("%d", 1); }',
    'extern "C" __global__ void k() { vprintf("x", 0); }',
    'extern "C" __global__ void k() { printf ("%d", 1); }',
])
def test_device_printf_is_refused(source: str) -> None:
    assert "printf" in (check_source(source) or "")


def test_printf_in_comments_and_names_is_fine() -> None:
    assert check_source('// no printf here\nextern "C" __global__ void my_printfless() {}') is None


def test_sanitize_removes_host_paths() -> None:
    log = "/tmp/tmpab12/kernel.cu(3): error: x\n/home/alice/secret/dir/helper.cuh(1): note"
    assert sanitize(log) == "kernel.cu(3): error: x\nhelper.cuh(1): note"


def test_compile_ahead_fills_the_cache_and_kills_a_compile_bomb(tmp_path, monkeypatch) -> None:
    """Helper processes compile into the cache the worker reads; one stuck in a compile bomb is
    killed at the time limit and the next candidate still gets compiled."""
    import time
    from pathlib import Path

    from evolve.evaluate.gpu.ahead import CompileAhead

    nvrtc_or_skip()
    monkeypatch.setenv("EVOLVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    bomb = (Path(__file__).parents[1] / "adversarial" / "compile_bomb_slow.cu").read_text()
    seed = task("vector_add").seeds()[0]
    ahead = CompileAhead(1, timeout_s=3.0)
    try:
        t0 = time.monotonic()
        ahead.submit(bomb, {}, "sm_90")
        ahead.submit(seed.source, seed.spec.default, "sm_90")
        while not list(tmp_path.glob("cubin/*.cubin")) and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        assert len(list(tmp_path.glob("cubin/*.cubin"))) == 1, "the seed, not the bomb"
        assert time.monotonic() - t0 < 30, "the bomb was stopped at its time limit"
        monkeypatch.setattr("evolve.kernel.compiler.CACHE_DIR", tmp_path / "cubin")
        assert compile_cuda(seed.source, seed.spec.default, "sm_90").cached
    finally:
        ahead.close()
    assert os.environ["OPENAI_API_KEY"] == "sk-must-not-leak"  # restored after each spawn


def test_a_compile_helper_slow_to_start_is_not_timed_out(tmp_path, monkeypatch) -> None:
    """On a loaded machine a helper's start (spawn, imports) took longer than the compile's limit
    and the candidate's compile was killed as if it were a bomb (a CPU-suite flake): the limit
    now starts when the helper is ready."""
    import time

    from evolve.evaluate.gpu.ahead import CompileAhead

    nvrtc_or_skip()
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(3)\n")  # every new interpreter
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(slow), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("EVOLVE_CACHE_DIR", str(tmp_path))
    seed = task("vector_add").seeds()[0]
    ahead = CompileAhead(1, timeout_s=2.0)
    try:
        ahead.submit(seed.source, seed.spec.default, "sm_90")
        t0 = time.monotonic()
        while not list(tmp_path.glob("cubin/*.cubin")) and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        assert list(tmp_path.glob("cubin/*.cubin")), "the seed's compile was killed with its slow start"
    finally:
        ahead.close()


def test_waiting_on_compile_ahead_lets_a_started_compile_finish_and_drops_a_queued_one(
        tmp_path, monkeypatch) -> None:
    import time
    from pathlib import Path

    from evolve.evaluate.gpu.ahead import CompileAhead

    nvrtc_or_skip()
    monkeypatch.setenv("EVOLVE_CACHE_DIR", str(tmp_path))
    bomb = (Path(__file__).parents[1] / "adversarial" / "compile_bomb_slow.cu").read_text()
    add, red = task("vector_add").seeds()[1], task("reduce_sum").seeds()[1]
    cubins = lambda: list(tmp_path.glob("cubin/*.cubin"))  # noqa: E731
    ahead = CompileAhead(1, timeout_s=4.0)
    try:
        ahead.submit(add.source, add.spec.default, "sm_90")
        deadline = time.monotonic() + 60
        while not ahead._running and time.monotonic() < deadline:
            time.sleep(0.01)
        ahead.wait(add.source, add.spec.default, "sm_90")  # started: wait for it
        assert len(cubins()) == 1
        ahead.submit(bomb, {}, "sm_90")  # keeps the only helper busy until its time limit
        ahead.submit(red.source, red.spec.default, "sm_90")
        ahead.wait(red.source, red.spec.default, "sm_90")  # still queued: dropped, returns at once
        time.sleep(6)
        assert len(cubins()) == 1, "the dropped candidate was not compiled ahead"
    finally:
        ahead.close()


def test_nvrtc_alone_compiles_what_cupy_s_nvrtc_compiles(monkeypatch) -> None:
    """The check extra (NVRTC through ctypes, no CuPy) offers every call compile_cuda makes: it
    lacked getPTX, read for the clock check, so a newcomer's first uncached compile was a traceback."""
    nvrtc_or_skip()
    from evolve.kernel import compiler, nvrtc

    try:
        nvrtc.getVersion()
    except Exception as exc:  # the check extra is in the test extra; its library may still be absent
        pytest.skip(f"NVRTC through ctypes is not available here: {exc}")
    source = (KERNELS_DIR / "vector_add" / "naive.cu").read_text()
    by_cupy = compile_cuda(source, {"BLOCK": 256}, "sm_90", cache=False)
    monkeypatch.setattr(compiler, "_nvrtc", lambda: nvrtc)
    alone = compile_cuda(source, {"BLOCK": 256}, "sm_90", cache=False)
    assert inspect(alone.cubin).code_digest == inspect(by_cupy.cubin).code_digest
    with pytest.raises(SourceRejected, match="reading the clock"):
        compile_cuda(source.replace("int i =", "long long t0 = clock64(); int i = (int)(t0 & 0) +"),
                     {"BLOCK": 256}, "sm_90", cache=False)


def test_the_compiler_s_own_headers_are_on_the_include_path(monkeypatch) -> None:
    """mma.h includes crt/mma.h, which CUDA's runtime wheel lacks (the H200 machine's PyTorch
    environment): NVRTC failed on an allowed header ('cannot open source file "crt/mma.h"') until
    the compiler's (nvcc's) header directory was searched too."""
    import cuda.pathfinder

    from evolve.kernel import compiler

    dirs = {"cudart": "/site/nvidia/cu13/include", "cccl": "/cuda/include/cccl", "nvcc": "/cuda/include"}
    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_header_directory", dirs.get)
    compiler._cuda_include_dirs.cache_clear()
    try:
        assert compiler._cuda_include_dirs() == tuple(dirs.values())
    finally:
        compiler._cuda_include_dirs.cache_clear()
