"""The TVM peers of evolve-bench (sgemm, softmax). On the CPU: the TE definitions, built for LLVM,
compute the task (the evaluator's own comparison at every correctness size and stress round), and
dlight's CUDA schedule of each generates one fp32 kernel that NVRTC (or nvcc) compiles for sm_90.
On the GPU: each peer on the bench's CuPy buffers matches the float64 reference. Skips where
``apache-tvm`` is not installed (no extra of cuda-evolve has it)."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evolve import dtypes
from evolve.task.task import Task, builtin_task

TASKS = ["sgemm", "softmax"]
PARAMS = {"sgemm": {"a_ptr", "b_ptr", "c_ptr"}, "softmax": {"x_ptr", "T_softmax_norm_ptr"}}


@pytest.fixture(scope="module")
def kernels() -> Any:
    pytest.importorskip("tvm")
    from evolve.bench import tvm_kernels

    return tvm_kernels


def _shapes(task: Task, sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
    return {a.name: task.shape(a, sizes) for a in task.args}


@pytest.mark.parametrize("name", TASKS)
def test_the_definition_computes_the_task(kernels: Any, name: str) -> None:
    """What the peers compute, unscheduled and run by LLVM on numpy inputs."""
    import tvm

    from evolve.task.correctness import compare_all

    task = builtin_task(name)
    fills = {a.name: dtypes.unwritten(a.dtype, np.random.default_rng(0)) for a in task.outputs}
    for sizes in task.correctness_sizes:
        main = tvm.compile(tvm.IRModule({"main": kernels.definition(name, _shapes(task, sizes))}),
                           target="llvm")["main"]
        for stress in (None, *task.stress):
            inputs = task.make_inputs(np, sizes, seed=3, stress=stress)
            outs = {a.name: np.full(task.shape(a, sizes), fills[a.name], np.float32) for a in task.outputs}
            tensors = {n: tvm.runtime.tensor(arr) for n, arr in {**inputs, **outs}.items()}
            main(*[tensors[n] for n in kernels.ARGS[name]])
            made = {n: tensors[n].numpy() for n in outs}
            reason = compare_all(np, task, made, task.expected(np, inputs, sizes), fills, sizes)
            assert reason is None, (sizes, stress, reason)


@pytest.mark.parametrize("name", TASKS)
def test_dlight_makes_one_fp32_cuda_kernel_that_compiles(kernels: Any, name: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """At every correctness size and the timing size, fp32 kernels on the task's float buffers with
    no tensor-core instruction (fp32 stays fp32); past one element, dlight's rule for the task
    (Matmul or GEMV, GeneralReduction) makes it one kernel through shared memory, where its Fallback
    rule makes three for a 1x1 softmax. Each source compiles to a cubin (NVRTC through cuda-bindings,
    as TVM compiles it when the module is loaded on a GPU, else nvcc)."""
    import tvm
    from tvm.support import nvcc

    nvrtc = importlib.util.find_spec("cuda.bindings") is not None
    if not nvrtc and not shutil.which("nvcc"):
        pytest.skip("neither cuda-bindings (NVRTC) nor nvcc is installed")
    cuda = os.environ.get("CUDA_PATH", "/usr/local/cuda")
    if not Path(cuda, "include/cuda_runtime.h").is_file():
        pytest.skip("no CUDA headers: set CUDA_PATH")
    monkeypatch.setenv("CUDA_PATH", cuda)
    task = builtin_task(name)
    target = tvm.target.Target("nvidia/nvidia-h100")  # sm_90a, H100's (and H200's) limits
    for sizes in (*task.correctness_sizes, *task.timing_sizes):
        mod = kernels.dlight(kernels.definition(name, _shapes(task, sizes)), target)
        src = kernels.cuda_source(mod, target)
        found = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?\w+\(([^)]*)\) \{', src)
        params = [[p.split() for p in ps.split(", ")] for ps in found]
        assert {p[0] for ps in params for p in ps} == {"float*"}, (sizes, found)
        assert PARAMS[name] <= {p[-1] for ps in params for p in ps}, (sizes, found)
        assert not re.search(r"\b(w?mma|tf32)\b", src), sizes
        if np.prod(list(sizes.values())) > 1:
            assert [{p[-1] for p in ps} for ps in params] == [PARAMS[name]], (sizes, found)
            assert "__shared__" in src, sizes
        with target:
            binary = nvcc.compile_cuda(src, target_format="cubin", arch="sm_90",
                                       compiler="nvrtc" if nvrtc else "nvcc")
        assert bytes(binary[:4]) == b"\x7fELF", sizes


def test_a_task_without_a_tvm_definition_is_refused(kernels: Any) -> None:
    from evolve.bench.peers import tvm_peers

    assert tvm_peers(builtin_task("transpose"), {}) == {}
    with pytest.raises(KeyError, match="no TVM definition for task 'transpose'"):
        kernels.definition("transpose", {})


def test_without_tvm_there_is_no_tvm_peer(caplog: pytest.LogCaptureFixture) -> None:
    """TVM stays optional: where it is missing the table goes without it, and says so."""
    if importlib.util.find_spec("tvm") is not None:
        pytest.skip("TVM is installed")
    from evolve.bench.peers import tvm_peers

    with caplog.at_level(logging.WARNING):
        assert tvm_peers(builtin_task("sgemm"), {}) == {}
    assert "no TVM peer (No module named 'tvm')" in caplog.text


@pytest.mark.gpu
@pytest.mark.parametrize("name", TASKS)
def test_the_tvm_peer_computes_the_task(kernels: Any, name: str) -> None:
    """"TVM (dlight)", built and NVRTC-compiled for this GPU, on the bench's own CuPy buffers, at
    every correctness size and the timing size, matches the float64 reference."""
    import cupy as cp

    from evolve.bench.peers import tvm_peers
    from evolve.bench.speed import check

    task = builtin_task(name)
    for sizes in (*task.correctness_sizes, *task.timing_sizes):
        inputs = task.make_inputs(cp, sizes, seed=2)
        refs = task.expected(cp, inputs, sizes)
        outputs = {a.name: cp.empty(task.shape(a, sizes), dtypes.storage(a.dtype)) for a in task.outputs}
        peers = tvm_peers(task, {**inputs, **outputs})
        assert list(peers) == ["TVM (dlight)"], sizes
        assert check(task, sizes, peers["TVM (dlight)"], outputs, refs) is None, sizes
