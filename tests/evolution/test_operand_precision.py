"""The prompt's paragraph on float32 operands and the tensor cores (a model that reads only the
TF32 peak rounds its operands and is judged wrong): its verdicts follow the task's tolerance and
agree with what the evaluator's comparison does to simulated kernels (tests/helpers/precision_models.py)."""

from __future__ import annotations

from evolve.evolution import operand_precision
from evolve.evolution.prompts import Prompts
from evolve.hardware import named
from evolve.task.task import builtin_task, load_task
from tests.helpers.precision_models import HONEST, REDUCED
from tests.helpers.tasks import hardware_config
from tests.task.test_precision import rounds, verdicts

H200 = named(hardware_config("h200"))


def block(task) -> str:
    return Prompts(task, H200, includes=[])._task_block


def test_sgemm_is_told_tf32_is_too_coarse_and_the_split_is_within() -> None:
    text = block(builtin_task("sgemm"))
    assert "tf32 (rounding an operand errs by up to 0.00049 of it): too coarse; split, about 2.4e-07: " \
           "within, at a third of its peak, 165 TFLOP/s against FFMA's 67" in text
    assert "bf16 (rounding an operand errs by up to 0.0039 of it): too coarse; split, about 1.5e-05: " \
           "still too coarse" in text


def test_the_verdicts_agree_with_the_evaluators_comparison() -> None:
    """What the paragraph calls too coarse fails sgemm's check somewhere; what it calls within
    passes at every correctness size."""
    assert any(verdicts(REDUCED["TF32 operands"], 1)) and any(verdicts(REDUCED["bf16x3"], 1))
    assert verdicts(HONEST["3xTF32"], 1) == [None] * len(rounds(1))


def test_a_loose_tolerance_admits_plain_tf32() -> None:
    base = builtin_task("sgemm")
    loose = load_task({**base.config, "tolerance": {"atol": 5e-3, "rtol": 5e-3, "l2": 5e-3}})
    text = operand_precision.note(loose, H200)
    assert "tf32 (rounding an operand errs by up to 0.00049 of it): within" in text
    assert "bf16 (rounding an operand errs by up to 0.0039 of it): too coarse; " \
           "split, about 1.5e-05: within" in text


def test_no_paragraph_where_it_does_not_apply() -> None:
    """Memory-bound (softmax), operands already in a tensor-core format (hgemm's float16), and a
    GPU without those tensor cores."""
    assert operand_precision.note(builtin_task("softmax"), H200) == ""
    assert operand_precision.note(builtin_task("hgemm"), H200) == ""
    assert "Float32 operands" not in block(builtin_task("softmax"))
    assert operand_precision.note(builtin_task("sgemm"), named(hardware_config("l4"))) != ""
    no_tensor = named({**hardware_config("h200"), "peak_tf32_tensor_flops": None,
                       "peak_bf16_tensor_flops": None})
    assert operand_precision.note(builtin_task("sgemm"), no_tensor) == ""


def test_the_paragraph_says_where_the_split_must_be_summed() -> None:
    """3xTF32 children that kept the whole K sum in the MMA's accumulator were judged wrong on the
    H200 (7 of 7, at K=4096-8192); the four that folded each k-slice in with ordinary float adds
    passed."""
    text = operand_precision.note(builtin_task("sgemm"), H200)
    assert "accumulator truncates" in text and "fresh accumulator" in text
