"""The evaluator's defences that need no GPU: what a compiled module may hold and call, bounded
parsing of everything a candidate supplies, and inputs made again from their seed.

Each test uses a real NVRTC compile where the defence reads a cubin; the adversarial suite
(tests/adversarial/, test_adversarial.py) drives whole attacks through the same code.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from evolve.errors import SpecError
from evolve.evaluate.plan import make_plan, param_mismatch
from evolve.evolution.answers import AnswerError, parse_child
from evolve.hardware import named
from evolve.kernel.compiler import MAX_MODULE_GLOBAL_BYTES, SourceRejected, compile_cuda, sanitize
from evolve.kernel.cubin import CubinError, inspect
from evolve.kernel.spec import MAX_RESTRICTIONS, Variant
from evolve.task.correctness import admit
from evolve.task.task import load_task
from tests.helpers.tasks import hardware_config, task

SPEC = """/*@evolve
kernels:
  - name: k
    grid: ceil_div(n, 256)
    block: 256
    args: [a, b, c, n]
*/
"""


def compiled(body: str) -> bytes:
    return compile_cuda(SPEC + body, {}, "sm_90", cache=False).cubin


def test_the_cubin_tells_parameters_memory_and_syscalls() -> None:
    cubin = compiled("""
struct Big { char bytes[4000]; };
__device__ float table[1024];
__device__ int counts[16] = {1, 2, 3};
extern "C" __global__ void k(const float* a, const float* b, float* c, Big big, double d) {
    int i = blockIdx.x * 256 + threadIdx.x;
    c[i] = a[i] + b[i] + table[i % 1024] + counts[i % 16] + big.bytes[i % 4000] + d;
    assert(i >= 0);
}
""")
    info = inspect(cubin)
    assert [(p.offset, p.size) for p in info.params["k"]] == [(0, 8), (8, 8), (16, 8), (24, 4000), (4024, 8)]
    assert info.param_bytes["k"] == 4032
    assert 4096 + 64 <= info.global_bytes < 4096 + 1024
    assert info.undefined == {"__assertfail"}  # assert is allowed: it only ends the launch


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_the_cubin_of_every_architecture_is_read(arch: str) -> None:
    """sm_80 and sm_86 modules hold value-less kernel info records (4 bytes each), which the reader
    once took for 2-byte ones: every candidate on an A100 was refused as unreadable."""
    cubin = compile_cuda(SPEC + """
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
""", {}, arch, cache=False).cubin
    assert [(p.offset, p.size) for p in inspect(cubin).params["k"]] == [(0, 8), (8, 8), (16, 8), (24, 4)]


def test_a_huge_device_array_is_counted_though_its_section_says_zero() -> None:
    with pytest.raises(SourceRejected, match="107374182400 bytes of __device__ memory"):
        compiled("""
__device__ float hog[100ULL << 28];
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) { c[0] = hog[n]; }
""")


def test_module_memory_is_capped() -> None:
    small = MAX_MODULE_GLOBAL_BYTES // 4 // 2
    compiled(f"""
__device__ float state[{small}];
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {{ c[0] = state[n]; }}
""")
    with pytest.raises(SourceRejected, match="__device__ memory"):
        compiled(f"""
__device__ float state[{4 * small}];
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {{ c[0] = state[n]; }}
""")


@pytest.mark.parametrize("name", ["__nv_aligned_device_malloc", "__cuda_syscall_malloc",
                                  "__cuda_syscall_cudaGetParameterBufferV2", "__cuda_syscall_something_new"])
def test_every_undefined_function_but_assert_is_refused(name: str) -> None:
    with pytest.raises(SourceRejected, match=r"may call only functions it defines"):
        compiled(f"""
extern "C" __device__ void* {name}(size_t, size_t);
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {{
    if ({name}(64, 16) == (void*)1) c[0] = a[0] + b[0];
}}
""")


def test_a_parameter_list_that_differs_from_the_spec_is_caught() -> None:
    t = task("vector_add")
    hw = named(hardware_config("h200"))
    kernel = 'extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {}'
    plan = make_plan(Variant.parse(SPEC + kernel).spec, t, t.correctness_sizes[0], {}, hw)
    ok = compiled(kernel)
    assert param_mismatch(plan, inspect(ok)) is None
    for params, words in (("const float* a, const float* b, float* c, long long n", "takes 4 parameters"),
                          ("const float* a, const float* b, float* c", "takes 3 parameters"),
                          ("const float* a, const float* b, float* c, int n, int m", "takes 5 parameters")):
        bad = compiled(f'extern "C" __global__ void k({params}) {{}}')
        reason = param_mismatch(plan, inspect(bad))
        assert reason is not None and words in reason, params


def test_a_malformed_cubin_is_refused_not_crashed_on() -> None:
    cubin = compiled('extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {}')
    for broken in (b"", b"\x7fELF", cubin[:200], cubin[:len(cubin) // 2], b"\x00" * 64):
        with pytest.raises(CubinError):
            inspect(broken)


def test_compiler_output_is_sanitized_in_linear_time() -> None:
    assert sanitize("/usr/local/cuda/include/cuda_fp16.h(12): error") == "cuda_fp16.h(12): error"
    assert sanitize("see /home/me/.secret/dir for x") == "see /home/me/.secret/dir for x"
    bomb = "error: #error " + "/a" * 50_000 + " x"  # the old pattern took minutes on this
    start = time.perf_counter()
    out = sanitize(bomb)
    assert time.perf_counter() - start < 1.0
    assert len(out) <= 64 * 1024


@pytest.mark.parametrize(("spec", "words"), [
    ("kernels: " + "[" * 3000 + "]" * 3000, "nest"),
    ("kernels:\n  - name: k\n    grid: " + "9" * 5000 + "\n    block: 1\n    args: [c]", "cannot be read"),
    ("kernels: [{name: k, grid: 1, block: 1, args: [c]}]\ntunables: {B: {values: [1, 2], default: 1}}\n"
     "restrictions:\n" + "".join(f"  - B >= {-i}\n" for i in range(MAX_RESTRICTIONS + 1)), "at most"),
    ("kernels: [{name: k, grid: 1, block: 1, args: [c]}]\nrestrictions: [[1, 2]]", "condition"),
    ("kernels:\n  - name: k\n    grid: [1\n    block: 1", "at line 6, column 10"),
])
def test_hostile_specs_are_spec_errors(spec: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        Variant.parse(f"// a kernel\n/*@evolve\n{spec}\n*/\n")


def test_enumerating_the_space_is_bounded_by_its_work() -> None:
    tunables = "\n".join(f"  T{i}: {{values: [1, 2, 3, 4, 5, 6, 7], default: 1}}" for i in range(6))
    terms = " + ".join(f"T{i % 6}" for i in range(40))
    restrictions = "\n".join(f"  - {terms} >= {k}" for k in range(10))
    source = f"/*@evolve\nkernels: [{{name: k, grid: 1, block: 1, args: [c]}}]\ntunables:\n{tunables}\n" \
             f"restrictions:\n{restrictions}\n*/\n"
    start = time.perf_counter()
    with pytest.raises(SpecError, match="too costly to enumerate"):
        Variant.parse(source)
    assert time.perf_counter() - start < 1.0


def test_unterminated_comments_cost_one_scan() -> None:
    start = time.perf_counter()
    with pytest.raises(SpecError, match="not closed"):
        Variant.parse("/*@evolve " + "/* " * 30_000)
    with pytest.raises(SpecError):
        Variant.parse("/*@evolve kernels: []*/\n" + "/* " * 30_000)
    assert time.perf_counter() - start < 2.0


def test_hostile_llm_answers_are_refused_as_answers() -> None:
    for spec in ("kernels: " + "[" * 3000 + "]" * 3000, "kernels: " + "9" * 5000):
        answer = f"```cuda\n/*@evolve\n{spec}\n*/\nextern \"C\" __global__ void k() {{}}\n```"
        with pytest.raises(AnswerError):
            parse_child(answer, None, "child")


def test_inputs_are_made_again_from_their_seed_and_change_everywhere_with_it() -> None:
    t = task("sgemm")
    sizes = t.correctness_sizes[-1]
    a, b = t.make_inputs(np, sizes, 11), t.make_inputs(np, sizes, 11)
    c = t.make_inputs(np, sizes, 12)
    for name in a:
        assert np.array_equal(a[name], b[name])
        assert np.mean(a[name] == c[name]) < 1e-4, "a new seed changes (practically) every element"
        x = a[name].astype(np.float64)
        assert abs((x.mean() - x.mean()) / x.std()) < 1 and 0.4 < x.std() < 2.5  # scaled normals
    refs = [t.expected(np, x, sizes)["c"] for x in (a, c)]
    tol = t.tolerance
    moved = np.abs(refs[0] - refs[1]) > tol.atol * np.abs(refs[0]).max() + tol.rtol * np.abs(refs[0])
    assert moved.mean() > 0.999, "a cached result of an earlier call is wrong almost everywhere"


def test_a_task_with_an_integer_output_is_admitted(tmp_path) -> None:
    t = load_task({
        "name": "argmax_rows", "reference": "tests.helpers.task_refs:argmax_rows",
        "args": {"x": {"role": "input", "shape": ["rows", "cols"]},
                 "idx": {"role": "output", "dtype": "int32", "shape": ["rows"]}},
        "sizes": {"correctness": [{"rows": 3, "cols": 5}, {"rows": 100, "cols": 33}],
                  "timing": [{"rows": 1000, "cols": 1000}]},
        "tolerance": {"atol": 0, "rtol": 0, "l2": 0},
        "traffic": {"bytes": "4 * rows * cols + 4 * rows"},
        "seeds": ["vector_add/naive.cu"],
    })
    admit(t)  # the no-op case fills int32 outputs without NaN
