"""The arch-specific target (sm_90a on an H100/H200): a launch spec opts in with ``arch_specific:
true``; NVRTC really compiles for it, the cubin cache keys on it, and every compiling path uses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.errors import SpecError
from evolve.evolution.prompts import Prompts
from evolve.hardware import named
from evolve.kernel.compiler import CompileError, compile_cuda, target_arch
from evolve.kernel.cubin import inspect
from evolve.kernel.spec import Variant, parse_spec
from evolve.task.files import read_task_file
from tests.app.test_check import copy, edit
from tests.helpers.runs import check_lines
from tests.helpers.tasks import hardware_config, nvrtc_or_skip, task

PLAIN = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.f; }'
HOPPER = '''extern "C" __global__ void k(float* x) {
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\\n" ::: "memory");
    x[threadIdx.x] = 1.f;
}'''
SPEC = "/*@evolve\nkernels:\n  - {name: k, grid: 1, block: 128, args: [x]}\n%s*/\n"


def test_the_target_is_the_arch_specific_one_only_when_asked_and_only_from_hopper_on() -> None:
    assert target_arch("sm_90", False) == "sm_90"
    assert target_arch("sm_90", True) == "sm_90a"
    assert target_arch("sm_100", True) == "sm_100a"
    assert target_arch("sm_80", False) == "sm_80"
    with pytest.raises(CompileError, match=r"needs a GPU with an arch-specific target .* this one is sm_80"):
        target_arch("sm_80", True)


def test_the_spec_opts_in_with_a_boolean() -> None:
    assert not parse_spec(SPEC % "").arch_specific
    assert parse_spec(SPEC % "arch_specific: true\n").arch_specific
    with pytest.raises(SpecError, match="'arch_specific' must be true or false"):
        parse_spec(SPEC % "arch_specific: sm_90a\n")


def test_nvrtc_compiles_for_sm90a_and_only_sm90a_takes_wgmma_and_setmaxnreg() -> None:
    nvrtc_or_skip()
    for source in (PLAIN, HOPPER):
        cubin = compile_cuda(source, {}, "sm_90a", cache=False).cubin
        assert cubin[:4] == b"\x7fELF" and "k" in inspect(cubin).params
    with pytest.raises(CompileError, match=r"not supported on \.target 'sm_90'"):
        compile_cuda(HOPPER, {}, "sm_90", cache=False)


def test_the_cubin_cache_keys_on_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvrtc_or_skip()
    monkeypatch.setattr("evolve.kernel.compiler.CACHE_DIR", tmp_path)
    first = {arch: compile_cuda(PLAIN, {}, arch) for arch in ("sm_90", "sm_90a")}
    assert not any(c.cached for c in first.values()) and len(list(tmp_path.glob("*.cubin"))) == 2
    assert all(compile_cuda(PLAIN, {}, arch).cached for arch in first)


def test_backend_check_compiles_an_arch_specific_seed_for_sm90a(tmp_path: Path) -> None:
    """The check compiles as the evaluator does: a Hopper-only seed is refused for sm_90 until its
    spec asks for sm_90a, and on an A100 the opt-in is one clear problem."""
    nvrtc_or_skip()
    folder = copy("bf16_rmsnorm", tmp_path)
    seed = folder / "block_row.cu"
    edit(seed, "    float s = 0.f;\n", '    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");\n'
                                      "    float s = 0.f;\n")
    cfg = read_task_file(folder / "bf16_rmsnorm.yaml")
    code, lines = check_lines(cfg, compile_all_up_to=2, compile_sample=1)
    assert code == 1 and any("not supported on .target 'sm_90'" in ln for ln in lines), lines
    edit(seed, "*/\n", "arch_specific: true\n*/\n")
    code, lines = check_lines(cfg, compile_all_up_to=2, compile_sample=1)
    assert code == 0 and "compiled for sm_90a (h200)" in lines[-1], lines
    code, lines = check_lines(cfg, hardware="a100", compile_all_up_to=2, compile_sample=1)
    assert code == 1 and any("needs a GPU with an arch-specific target" in ln for ln in lines), lines


def test_compile_ahead_prepares_what_the_worker_compiles() -> None:
    """The GPU backend's compile-ahead key (the cache entry the worker then finds) uses the same
    target as the worker; nothing is prepared where the GPU has none."""
    from evolve.evaluate.cupy_backend import CupyBackend

    backend = CupyBackend({"compile_ahead": 0})
    plain, hopper = (Variant.parse(SPEC % extra + PLAIN) for extra in ("", "arch_specific: true\n"))
    backend._arch = "sm_90"
    assert backend._job(plain, {})[2] == "sm_90" and backend._job(hopper, {})[2] == "sm_90a"
    backend._arch = "sm_80"
    assert backend._job(hopper, {}) is None


def test_the_prompt_names_tensor_core_peaks_and_the_arch_specific_target() -> None:
    h200 = Prompts(task("hgemm"), named(hardware_config("h200")), includes=[])._task_block
    assert "fp16 tensor cores 989.0 TFLOP/s, bf16 tensor cores 989.0 TFLOP/s" in h200
    assert "fp16_tensor peak 989.0 TFLOP/s (datasheet)" in h200
    assert "need `arch_specific: true` in the launch spec, which compiles the kernel for sm_90a" in h200
    a100 = Prompts(task("hgemm"), named(hardware_config("a100")), includes=[])._task_block
    assert "fp16 tensor cores 312.0 TFLOP/s" in a100 and "arch_specific" not in a100.split("Launch-spec")[0]
