"""The KernelBench measurement's judging, on this CPU with PyTorch: the problem file and best.py
contract, fresh signed-normal inputs, the float64 reference, the check of every implementation and
of every timed output. The run's ``best.py`` is a stand-in from tests/kernelbench_models (PyTorch)
until best.py's own ModelNew lands; the timing itself is in test_kernelbench_gpu.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.bench import kernelbench_measure as km
from evolve.errors import EvolveError
from evolve.paths import ROOT

torch = pytest.importorskip("torch")
PROBLEMS = ROOT / "tests" / "kernelbench_problems"
RELU = PROBLEMS / "level1" / "1_relu.py"
LINEAR = PROBLEMS / "level2" / "1_linear_bias_relu.py"

MODELS = ROOT / "tests" / "kernelbench_models"  # stand-ins for a run's best.py, each with a ModelNew


def run_dir(tmp_path: Path, best: str) -> Path:
    d = tmp_path / best
    d.mkdir()
    (d / "best.py").write_text((MODELS / f"{best}.py").read_text())
    return d


def judged(problem: Path, run: Path, seeds: int = 3) -> tuple[dict[str, str], list, list]:
    mod = km.load_problem(problem)
    with torch.no_grad():
        model, impls, failed = km.implementations(mod, km.load_model_new(run), [], "cpu")
        sets, refs = km.checked_inputs(mod, model, seeds, "cpu")
        wrong, _ = km.check_all(impls, sets, refs)
    return failed | wrong, sets, refs


def test_inputs_are_fresh_signed_normals_of_the_files_shapes() -> None:
    mod = km.load_problem(RELU)
    (a,), (b,), (again,) = (km.draw_inputs(mod, s, "cpu") for s in (1, 2, 1))
    assert a.shape == (8, 1000) and a.dtype == torch.float32
    assert bool((a < 0).any()) and abs(float(a.mean())) < 0.1 and 0.9 < float(a.std()) < 1.1
    assert torch.equal(a, again) and not torch.equal(a, b)


def test_inputs_a_log_needs_positive_are_drawn_over_the_files_range() -> None:
    """Signed normal probabilities made a KL divergence's reference NaN (KernelBench L1 98: "got
    nan, expected nan", every implementation, eager too, judged wrong on the H200). Where the
    reference is not finite, the inputs positive in the file's own draw are drawn over its range."""
    mod = km.load_problem(ROOT / "tests" / "torch_problems" / "log_ratio.py")
    model = mod.Model().eval()
    with torch.no_grad():
        p, _ = km.draw_inputs(mod, 1000, "cpu")
        assert bool((p < 0).any())  # the default draw: the reason it was NaN
        sets, refs = km.checked_inputs(mod, model, 2, "cpu")
        assert all(bool((x > 0).all()) for xs in sets for x in xs)
        assert all(bool(torch.isfinite(r).all()) for ref in refs for r, _ in ref)
        assert not torch.equal(sets[0][0], sets[1][0])  # still fresh per seed
        wrong, _ = km.check_all({"eager": model}, sets, refs)
    assert wrong == {}


def test_a_correct_modelnew_passes_and_eager_matches_float64(tmp_path: Path) -> None:
    failed, _, refs = judged(RELU, run_dir(tmp_path, "relu"))
    assert failed == {} and refs[0][0][0].dtype == torch.float64 and refs[0][0][1] == torch.float32
    failed, _, _ = judged(LINEAR, run_dir(tmp_path, "linear"))
    assert failed == {}  # parameters loaded from the Model's state_dict, a GEMM with an epilogue


def test_a_kernel_right_only_on_uniform_inputs_fails_on_signed_ones(tmp_path: Path) -> None:
    run = run_dir(tmp_path, "identity")
    failed, _, _ = judged(RELU, run)
    assert set(failed) == {km.MODEL_NEW} and "elements outside tolerance" in failed[km.MODEL_NEW]
    mod = km.load_problem(RELU)  # KernelBench's own draw, U[0,1): the same kernel passes
    (x,) = mod.get_inputs()
    model = mod.Model().eval()
    ref = km.Reference(model, [torch.float32])([x])
    assert km.check(km.load_model_new(run)()(x), ref) is None


def test_a_modelnew_that_cannot_take_the_models_state_is_a_reason(tmp_path: Path) -> None:
    failed, _, _ = judged(LINEAR, run_dir(tmp_path, "no_params"))
    assert failed[km.MODEL_NEW].startswith("ModelNew could not be built: ")
    assert "Unexpected key" in failed[km.MODEL_NEW]


def test_the_contract_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(EvolveError, match=r"has no best\.py"):
        km.load_model_new(tmp_path)
    (tmp_path / "best.py").write_text("def launch():\n    pass\n")
    with pytest.raises(EvolveError, match="defines no class ModelNew"):
        km.load_model_new(tmp_path)
    (tmp_path / "p.py").write_text("class Model:\n    pass\n")
    with pytest.raises(EvolveError, match="not a KernelBench problem file: no get_inputs, get_init_inputs"):
        km.load_problem(tmp_path / "p.py")


def test_outputs_of_the_wrong_kind_are_reasons() -> None:
    want = [(torch.zeros(3, dtype=torch.float64), torch.float32)]
    assert km.check((torch.zeros(3), torch.zeros(3)), want) == "2 outputs, the Model returns 1"
    assert km.check(torch.zeros(3, dtype=torch.float16), want).startswith("output 0: dtype torch.float16")
    assert "shape (4,)" in km.check(torch.zeros(4), want)
    assert km.check(3.0, want) == "the forward returned float, not tensors"


def test_every_timed_output_is_checked_against_its_own_inputs(tmp_path: Path) -> None:
    """The rotation's calls see input set after input set; a stale result (the previous set's),
    a NaN or a wrong shape in any call is counted, with no host sync until the end."""
    _, sets, refs = judged(RELU, run_dir(tmp_path, "relu"), seeds=2)
    checker = km.TimedCheck(refs)
    rot = km.Rotation(torch.relu, sets, checker)
    for _ in range(5):
        rot()
        rot.after()
    assert checker.calls == 5 and checker.failures() == 0
    assert {id(x) for x in (sets[0][0], sets[1][0])} and rot.k == 1
    stale = torch.relu(sets[0][0])
    checker(stale, 1)  # the output of the other input set
    nan = torch.relu(sets[0][0])
    nan[3, 7] = float("nan")
    checker(nan, 0)
    checker(torch.relu(sets[0][0])[:4], 0)
    checker(torch.relu(sets[0][0]).half(), 0)
    assert checker.calls == 9 and checker.failures() == 4
