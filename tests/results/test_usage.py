"""Using the result: best.cu compiles on its own, best.py beside it is a module with the task's
signature that binds sizes from shapes and refuses what it cannot launch, and registers a
torch.library op whose fake implementation gives the output shapes (GPU launches:
tests/test_gpu_usage.py)."""

from __future__ import annotations

import inspect
import json
import keyword
import re
from pathlib import Path

import numpy as np
import pytest

from evolve.kernel.compiler import compile_cuda
from evolve.results.bestpy import RESERVED, function_name
from evolve.results.usage import Kernel, bind
from evolve.task.files import read_task_file
from evolve.task.task import load_task
from tests.helpers.runs import cli, import_file, write_best
from tests.helpers.tasks import OWN, task


def test_an_exported_run_leaves_a_best_cu_that_compiles_alone_and_a_best_py(in_tmp: Path) -> None:
    out = cli("task=layernorm", "backend=replay", "hardware=h200", "search.n_trials=3", "llm=none",
              "run.name=ln")
    assert out.returncode == 0, out.stderr
    run = in_tmp / "runs" / "ln"
    source = (run / "best.cu").read_text()
    assert "#define EPS 1.0e-5f" in source  # the task's define: 'identifier "EPS" is undefined' before
    compile_cuda(source, {}, "sm_90", cache=False)  # no -D flags at all
    best = import_file(run / "best.py", "best_ln")
    assert list(inspect.signature(best.layernorm).parameters) == ["x", "gamma", "beta", "y"]
    assert "x: input float32[rows, cols]" in best.layernorm.__doc__
    info = json.loads((run / "best.json").read_text())
    assert best.kernel.tunables == info["tunables"] and info["task_config"]["name"] == "layernorm"


def test_best_py_refuses_host_arrays_in_one_clear_line(tmp_path: Path) -> None:
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "best_ln_host")
    x, g = np.zeros((3, 5), np.float32), np.zeros(5, np.float32)
    with pytest.raises(TypeError, match="ndarray is not on the GPU: pass a CuPy array or a CUDA tensor"):
        best.layernorm(x, g, g)
    with pytest.raises(TypeError, match="layernorm\\(\\) needs beta"):
        best.kernel(x, g)
    with pytest.raises(TypeError, match="must be a CuPy array or a CUDA tensor, got list"):
        best.kernel(x, g, [1, 2])


def test_sizes_are_bound_from_the_shapes() -> None:
    t = task("layernorm")
    assert bind(t, {"x": (3, 5), "gamma": (5,), "beta": (5,)}) == {"rows": 3, "cols": 5}
    with pytest.raises(ValueError, match=r"gamma has cols = 6 but another argument .* says cols = 5"):
        bind(t, {"x": (3, 5), "gamma": (6,)})
    with pytest.raises(ValueError, match=r"x must have 2 dimensions \[rows, cols\], got shape \(15,\)"):
        bind(t, {"x": (15,)})
    with pytest.raises(ValueError, match=r"give rows=\.\.\."):
        bind(t, {"gamma": (5,)})
    with pytest.raises(ValueError, match=r"unknown size\(s\) \['n'\]"):
        bind(t, {"x": (3, 5)}, {"n": 1})
    derived = load_task({**read_task_file(OWN / "histogram" / "histogram.yaml"),
                         "args": {"values": {"role": "input", "dtype": "int32", "shape": ["2 * n"]},
                                  "counts": {"role": "inout", "dtype": "int32", "shape": ["bins"]}}})
    with pytest.raises(ValueError, match=r"give n=\.\.\."):
        bind(derived, {"values": (8,), "counts": (4,)})
    assert bind(derived, {"values": (8,), "counts": (4,)}, {"n": 4}) == {"n": 4, "bins": 4}
    with pytest.raises(ValueError, match=r"values must have shape \(6,\) at n=3,bins=4, got \(8,\)"):
        bind(derived, {"values": (8,), "counts": (4,)}, {"n": 3})
    assert Kernel.size_parameters(derived) == ["n"]


def test_an_inout_task_returns_its_updated_argument(tmp_path: Path) -> None:
    t = load_task(read_task_file(OWN / "histogram" / "histogram.yaml"))
    best = import_file(write_best(t, tmp_path / "h"), "best_histogram")
    assert list(inspect.signature(best.histogram).parameters) == ["values", "counts"]
    doc = best.histogram.__doc__
    assert "counts: inout int32[bins]" in doc and "Returns counts." in doc
    compile_cuda((tmp_path / "h" / "best.cu").read_text(), {}, "sm_90")


def test_the_torch_op_has_the_task_schema_and_output_shapes(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "best_ln_torch")
    op = best.register_torch_op("evolve_test_ln")
    assert best.register_torch_op("evolve_test_ln") is op  # once
    assert "layernorm(Tensor x, Tensor gamma, Tensor beta) -> Tensor" in str(op._schemas[""])
    y = op(torch.empty(5, 7, device="meta"), torch.empty(7, device="meta"), torch.empty(7, device="meta"))
    assert y.shape == (5, 7) and y.dtype == torch.float32
    with pytest.raises(ValueError, match=r"^a tensor on cpu cannot be launched on"):  # not the dispatch dump
        op(torch.ones(5, 7), torch.ones(7), torch.ones(7))
    hist = load_task(read_task_file(OWN / "histogram" / "histogram.yaml"))
    hop = import_file(write_best(hist, tmp_path / "h"), "best_h_torch").register_torch_op("evolve_test_h")
    assert "histogram(Tensor values, Tensor(a0!) counts) -> ()" in str(hop._schemas[""])
    rms = load_task(read_task_file(OWN / "bf16_rmsnorm" / "bf16_rmsnorm.yaml"))
    rop = import_file(write_best(rms, tmp_path / "r"), "best_r_torch").register_torch_op("evolve_test_r")
    out = rop(torch.empty(3, 9, device="meta", dtype=torch.bfloat16), torch.empty(9, device="meta",
                                                                                 dtype=torch.bfloat16))
    assert out.shape == (3, 9) and out.dtype == torch.bfloat16


HOSTILE = [
    'C:\\users\\underline \\N{oops} \\x \\', "'''", '"', '{fn}',  # escapes: a SyntaxError in a docstring
    '""";__import__("pathlib").Path(r"MARK").touch();"""',  # a statement on import
    "'''; __import__('pathlib').Path(r'MARK').touch(); '''",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_no_text_of_the_task_reaches_best_py_as_code(tmp_path: Path, text: str) -> None:
    mark = tmp_path / "INJECTED"
    payload = text.replace("MARK", str(mark))
    base = dict(task("layernorm").config)
    args = {f"x{payload}": base["args"]["x"], **{k: v for k, v in base["args"].items() if k != "x"}}
    cfg = {**base, "stress": None, "name": f'ln"{payload}', "description": payload, "args": args,
           "defines": {"EPS": f"1.0e-5f /* {payload} */"}}
    t = load_task(cfg)
    path = write_best(t, tmp_path / "b")
    source = path.read_text()
    compile(source, str(path), "exec")  # no SyntaxError
    assert str(mark) not in source and (len(payload) < 8 or payload not in source)  # none of it
    best = import_file(path, f"best_hostile_{HOSTILE.index(text)}")
    assert not mark.exists()
    name = function_name(t)
    assert name.startswith("ln") and re.fullmatch(r"[A-Za-z0-9_]+", name)
    fn = getattr(best, name)
    with pytest.raises(TypeError, match="needs"):
        fn()  # the old best.py ran a statement from the description here
    assert not mark.exists()
    assert payload in fn.__doc__ and f"x{payload}: input float32[rows, cols]" in fn.__doc__
    assert str(inspect.signature(fn)) == "(*args, **kwargs)"  # a name that is no identifier
    assert best.kernel.task.defines == (("EPS", f"1.0e-5f /* {payload} */"),)
    assert best.register_torch_op.__doc__.startswith("Register the kernel")


def test_a_task_named_like_best_py_s_own_names_does_not_replace_them(tmp_path: Path) -> None:
    for name in ("kernel", "ModelNew", "class", "9lives", "__init__"):
        t = load_task({**dict(task("layernorm").config), "name": name})
        fn = function_name(t)
        assert fn.isidentifier() and not keyword.iskeyword(fn) and fn not in RESERVED, fn
        best = import_file(write_best(t, tmp_path / name), f"best_named_{fn}")
        assert isinstance(best.kernel, Kernel) and callable(getattr(best, fn))


def test_argument_errors_say_what_the_call_takes_in_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    best = import_file(write_best(task("layernorm"), tmp_path / "ln"), "best_ln_errors")
    x, g = torch.zeros(3, 5), torch.zeros(5)
    with pytest.raises(TypeError, match=r"^layernorm\(\) got an unexpected argument 'a' \(arguments: x, "
                                        r"gamma, beta, y; sizes: rows, cols\)$"):
        best.layernorm(g, g, g, a=x)  # was: "only one element tensors can be converted to Python scalars"
    with pytest.raises(TypeError, match=r"^layernorm\(\): size rows must be an int, got Tensor$"):
        best.layernorm(x, g, g, rows=x)
    with pytest.raises(TypeError, match=r"^layernorm\(\) got x twice$"):
        best.layernorm(x, g, g, x=x)
    with pytest.raises(TypeError, match=r"^layernorm: gamma must be float32, got float64$"):
        best.layernorm(x, g.double(), g)
    with pytest.raises(ValueError, match=r"^a tensor on cpu cannot be launched on: move it to the GPU"):
        best.layernorm(x, g, g)
    assert str(inspect.signature(best.layernorm)) == "(x, gamma, beta, y=None)"
    hist = load_task(read_task_file(OWN / "histogram" / "histogram.yaml"))
    assert str(inspect.signature(import_file(write_best(hist, tmp_path / "h"), "best_h_sig").histogram)
               ) == "(values, counts)"
