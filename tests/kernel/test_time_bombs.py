"""Time bombs (issue 24.4): nothing may depend on when or where a kernel was built or when it
runs. Build macros are refused in the source (also spelled by token pasting); clock reads are
refused in the PTX NVRTC made, whatever the source spelled. Real NVRTC compiles."""

from __future__ import annotations

import pytest

from evolve.kernel.compiler import SourceRejected, compile_cuda

KERNEL = 'extern "C" __global__ void k(float* o) {{ {body} }}\n'


def compile_body(body: str, prelude: str = "") -> None:
    compile_cuda(prelude + KERNEL.format(body=body), {}, "sm_90", cache=False)


@pytest.mark.parametrize("name", ["__DATE__", "__TIME__", "__TIMESTAMP__", "__FILE__", "__BASE_FILE__",
                                  "__FILE_NAME__"])
def test_build_macros_are_refused(name: str) -> None:
    with pytest.raises(SourceRejected, match=f"{name} is not allowed: it makes the kernel depend on when"):
        compile_body(f"o[0] = (float){name}[1];")


def test_a_build_macro_spelled_by_token_pasting_is_refused() -> None:
    with pytest.raises(SourceRejected, match=r"token pasting .##. with identifiers that can spell __TIME__"):
        compile_body("o[0] = (float)CAT(__TI, ME__)[7];", "#define CAT(a, b) a##b\n")


def test_token_pasting_and_the_names_in_comments_or_strings_are_fine() -> None:
    compile_body("const char* s = \"__DATE__\"; o[0] = (float)CAT(1, 2) + s[0]; /* __TIME__ */",
                 "#define CAT(a, b) a##b\n// __TIMESTAMP__\n")


@pytest.mark.parametrize(("body", "register"), [
    ('unsigned long long t; asm volatile("mov.u64 %0, %%global" "timer;" : "=l"(t)); o[0] = (float)t;',
     "globaltimer"),  # split over two literals: no source scan sees it
    ('unsigned int t; asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t)); o[0] = (float)t;',
     "globaltimer_lo"),
    ("o[0] = (float)clock64();", "clock64"),
    ("o[0] = (float)clock();", "clock(64)?"),
    ('unsigned int t; asm volatile("mov.u32 %0, %%clock;" : "=r"(t)); o[0] = (float)t;', "clock"),
])
def test_clock_reads_are_refused_from_the_ptx(body: str, register: str) -> None:
    with pytest.raises(SourceRejected, match=rf"reading the clock \(%{register} in the PTX"):
        compile_body(body)


def test_an_ordinary_kernel_compiles() -> None:
    compile_body("o[threadIdx.x] = (float)__LINE__;")
