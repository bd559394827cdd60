"""``backend=check``: a task checked without a GPU, one line per problem, exit 0 when all is well.

Each broken task is one of the test's own tasks (tests/own_tasks/) with one fault put in; the
seeds are really compiled with NVRTC.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from evolve.paths import CONF_DIR, ROOT
from evolve.task.files import read_task_file
from tests.helpers.runs import check_lines, cli
from tests.helpers.tasks import OWN, TASKS, task_config


def copy(name: str, tmp_path: Path) -> Path:
    shutil.copytree(OWN / name, tmp_path / name)
    return tmp_path / name


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("name", ["row_argmax", "bf16_rmsnorm", "histogram"])
def test_the_own_tasks_are_ready(name: str) -> None:
    code, lines = check_lines(read_task_file(OWN / name / f"{name}.yaml"))
    assert code == 0, lines
    assert lines[-1].startswith(f"check: task {name} is ready: reference right at 4 sizes, admitted, "
                                "1 seed(s)")
    assert "compiled for sm_90 (h200)" in lines[-1]


def test_the_command_exits_0_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = copy("histogram", tmp_path)
    monkeypatch.chdir(tmp_path)
    out = cli(f"task={folder / 'histogram.yaml'}", "backend=check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0].startswith("note: hardware=auto reads no GPU here: checking for h200")
    assert "check: task histogram is ready" in out.stdout and "4 compiled for sm_90" in out.stdout


def test_another_target_compiles_for_its_architecture() -> None:
    code, lines = check_lines(read_task_file(OWN / "bf16_rmsnorm" / "bf16_rmsnorm.yaml"), hardware="a100")
    assert code == 0, lines
    assert "5 compiled for sm_80 (a100)" in lines[-1]


REF_FAULTS = [
    ("return {\"counts\": x[\"counts\"] + added}",
     "return {\"counts\": x[\"counts\"] + added / (sizes[\"n\"] - 1)}",
     r"reference at n=1,bins=1: (ZeroDivisionError|.*NaN or infinite)"),
    ("return {\"counts\": x[\"counts\"] + added}", "return {\"counts\": x[\"counts\"][:1]}",
     r"reference at n=1000,bins=7: task histogram: reference must return 'counts' with shape \(7,\), "
     r"got \(1,\)"),
    ("return {\"counts\": x[\"counts\"] + added}", "return {\"counts\": x[\"counts\"] + added + 0.5}",
     r"counts is int32 but the reference gives values that are not integers in \[-2147483648, 2147483647\]"),
    ("return {\"counts\": x[\"counts\"] + added}",
     "import random\n    return {\"counts\": x[\"counts\"] + added + random.randint(0, 9)}",
     r"counts differs between two calls on the same inputs"),
    ("added = ", "added = undefined_name + ",
     r"NameError: name 'undefined_name' is not defined \(.*refs.py:5\)"),
]


@pytest.mark.parametrize(("old", "new", "message"), REF_FAULTS)
def test_a_faulty_reference_is_one_line_per_size(tmp_path: Path, old: str, new: str, message: str) -> None:
    folder = copy("histogram", tmp_path)
    edit(folder / "refs.py", old, new)
    code, lines = check_lines(read_task_file(folder / "histogram.yaml"))
    problems = [ln for ln in lines if ln.startswith("problem:")]
    assert code == 1 and problems and lines[-1] == f"check: task histogram has {len(problems)} problem" + (
        "s" if len(problems) > 1 else "")
    assert any(re.search(message, ln) for ln in problems), lines


def test_a_task_a_trivial_kernel_passes_is_not_admitted(tmp_path: Path) -> None:
    folder = copy("bf16_rmsnorm", tmp_path)
    cfg = {**read_task_file(folder / "bf16_rmsnorm.yaml"), "tolerance": {"atol": 10, "rtol": 10, "l2": 10}}
    code, lines = check_lines(cfg)
    assert code == 1 and any("is not admitted: a trivial kernel" in ln for ln in lines)


SEED_FAULTS = [
    # a configuration that does not compile
    ("if (i < n) atomicAdd", "\n#if BLOCK == 512\n#error too big\n#endif\n    if (i < n) atomicAdd",
     "problem: seed atomic.cu BLOCK=512: "),
    # a grid that is zero at a small size
    ("grid: ceil_div(n, BLOCK)", "grid: n // BLOCK",
     "problem: seed atomic.cu: 4 of 4 configurations cannot launch at n=1,bins=1 (first: BLOCK=128: "),
    # a parameter the spec does not pass
    ("int n) {", "int n, int extra) {", "takes 4 parameters (8, 8, 4, 4 bytes) but the spec passes 3"),
    # a kernel that the spec names differently
    ("  - name: histogram", "  - name: histogram_v2", "kernel 'histogram_v2' is not in the compiled module"),
    # a define the task does not have
    ("atomicAdd(&counts[values[i]], 1)", "atomicAdd(&counts[values[i]], STEP)",
     'identifier "STEP" is undefined'),
]


@pytest.mark.parametrize(("old", "new", "message"), SEED_FAULTS)
def test_a_faulty_seed_is_reported_with_its_configuration(tmp_path: Path, old: str, new: str,
                                                          message: str) -> None:
    folder = copy("histogram", tmp_path)
    edit(folder / "atomic.cu", old, new)
    code, lines = check_lines(read_task_file(folder / "histogram.yaml"))
    assert code == 1 and any(message in ln for ln in lines), lines


def test_a_large_space_is_sampled_with_its_default(tmp_path: Path) -> None:
    folder = copy("histogram", tmp_path)
    edit(folder / "atomic.cu", "  BLOCK: {values: [128, 256, 512, 1024], default: 256}",
         "  BLOCK: {values: [128, 256, 512, 1024], default: 256}\n  PAD: {values: [0, 1, 2, 3, 4, 5, 6, 7, 8,"
         " 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], default: 3}")
    code, lines = check_lines(read_task_file(folder / "histogram.yaml"), compile_all_up_to=64,
                              compile_sample=5)
    assert code == 0, lines
    assert "80 configurations planned at every size, 6 compiled" in lines[-1]


def test_a_task_that_does_not_load_is_one_problem(tmp_path: Path) -> None:
    folder = copy("histogram", tmp_path)
    (folder / "refs.py").unlink()
    code, lines = check_lines(read_task_file(folder / "histogram.yaml"))
    assert code == 1 and lines == [
        f"problem: task histogram: reference module 'refs' not found (looked in {folder} and the Python "
        "path)",
        "check: task histogram has 1 problem"]


@pytest.mark.parametrize("name", TASKS)
def test_every_built_in_task_passes_the_check(name: str) -> None:
    code, lines = check_lines({**task_config(name), "dir": str(CONF_DIR / "task")}, compile_all_up_to=8,
                      compile_sample=3)
    assert code == 0, lines


def test_one_mistake_is_one_line(tmp_path: Path) -> None:
    """Issue 28.7: a seed that never compiles, a reference that always raises: one line each, with a count."""
    folder = copy("histogram", tmp_path)
    edit(folder / "atomic.cu", "atomicAdd(&counts[values[i]], 1);", "atomicAdd(&counts[values[i]], 1)")
    edit(folder / "refs.py", "added = ", "added = undefined_name + ")
    code, lines = check_lines(read_task_file(folder / "histogram.yaml"))
    problems = [ln for ln in lines if ln.startswith("problem:")]
    assert code == 1 and len(problems) == 2, lines
    assert re.search(r"^problem: reference: NameError: .* \(at 4 of 4 sizes, first: n=1,bins=1\)$",
                     problems[0])
    assert re.search(r"^problem: seed atomic.cu: .*expected a \";\".* \(in 4 of 4 configurations, first: "
                     r"BLOCK=128\)$", problems[1]), problems[1]


def _hiding(folder: Path, *modules: str) -> Path:
    """A sitecustomize that makes importing these top-level modules fail (in every subprocess)."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import sys\n\n\nclass Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {modules!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n\n\n"
        "sys.meta_path.insert(0, Hide())\n")
    return folder


def test_check_needs_nvrtc_alone_not_cupy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28.2: after the no-GPU install plus the check extra (NVRTC alone, no CuPy), check compiles."""
    folder = copy("bf16_rmsnorm", tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOLVE_CACHE_DIR", str(tmp_path / "cache"))  # a fresh machine's: nothing cached
    out = cli(f"task={folder / 'bf16_rmsnorm.yaml'}", "backend=check", "hardware=h200",
              pythonpath=[_hiding(tmp_path / "hide", "cupy", "cupy_backends")])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "check: task bf16_rmsnorm is ready" in out.stdout and "compiled for sm_90" in out.stdout


def test_a_missing_compiler_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = copy("histogram", tmp_path)
    monkeypatch.chdir(tmp_path)
    out = cli(f"task={folder / 'histogram.yaml'}", "backend=check", "hardware=h200",
              pythonpath=[_hiding(tmp_path / "hide", "cupy", "cupy_backends", "cuda")])
    assert out.returncode == 1, out.stdout + out.stderr
    problems = [ln for ln in out.stdout.splitlines() if ln.startswith("problem:")]
    assert len(problems) == 1 and "NVRTC is not available (ModuleNotFoundError):" in problems[0], problems
    assert f"pip install -e '{ROOT}[check]'" in problems[0]  # works from the user's folder too


def test_a_kernel_pointing_to_the_wrong_type_is_a_problem(tmp_path: Path) -> None:
    """Issue 28.9: float* for a bfloat16 argument compiles (the cubin has sizes, not types) but
    computes garbage: check names it."""
    folder = copy("bf16_rmsnorm", tmp_path)
    edit(folder / "block_row.cu", "const __nv_bfloat16* __restrict__ w", "const float* __restrict__ w")
    code, lines = check_lines(read_task_file(folder / "bf16_rmsnorm.yaml"))
    assert code == 1 and any("kernel rmsnorm's parameter 2 (w) points to float, but w is bfloat16 "
                             "(__nv_bfloat16) (in 5 of 5 configurations" in ln for ln in lines), lines


def test_check_refuses_what_a_run_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = copy("histogram", tmp_path)
    monkeypatch.chdir(tmp_path)
    out = cli(f"task={folder / 'histogram.yaml'}", "backend=check", "search.sampler=tpee")
    assert out.returncode == 2 and "unknown search.sampler" in out.stderr, out.stdout + out.stderr


def test_a_pytorch_problem_without_pytorch_is_one_line(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A newcomer without PyTorch got a traceback (ModuleNotFoundError from the task's module)."""
    from tests.helpers.runs import one_line_error

    monkeypatch.chdir(tmp_path)
    out = cli(f"task={ROOT / 'tests/torch_problems/gelu.py'}", "backend=check",
              pythonpath=[_hiding(tmp_path / "hide", "torch")])
    one_line_error(out, "gelu.py is a PyTorch problem: it needs PyTorch", "pip install torch")


def test_evolve_check_is_backend_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25.2: the task check reads as what it does, ``evolve check task=...``."""
    from tests.helpers.runs import one_line_error

    monkeypatch.chdir(tmp_path)
    out = cli("check", "task=vector_add", "hardware=h200")
    assert out.returncode == 0 and "check: task vector_add is ready" in out.stdout, out.stdout + out.stderr
    one_line_error(cli("check", "task=vector_add", "backend=replay"), "evolve check is backend=check")


def test_check_counts_one_correctness_size_as_one_size() -> None:
    cfg = {**read_task_file(OWN / "histogram" / "histogram.yaml"), "seeds": []}
    cfg["sizes"] = {**cfg["sizes"], "correctness": cfg["sizes"]["correctness"][-1:]}
    code, lines = check_lines(cfg)
    assert code == 0 and "reference right at 1 size, admitted" in lines[-1], lines
