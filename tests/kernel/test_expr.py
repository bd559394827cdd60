from fractions import Fraction

import pytest

from evolve.errors import SpecError
from evolve.expr import MAX_LENGTH, Expr


@pytest.mark.parametrize(("text", "env", "want"), [
    ("1 + 2 * 3", {}, 7),
    ("ceil_div(n, BLOCK)", {"n": 1000, "BLOCK": 256}, 4),
    ("ceil_div(1, 1024)", {}, 1),
    ("n // 4 + n % 4", {"n": 10}, 4),
    ("min(a, b, 3) + max(a, b)", {"a": 5, "b": 9}, 12),
    ("-a + +b", {"a": 2, "b": 3}, 1),
    ("rows * cols / 2", {"rows": 3, "cols": 4}, 6),
    ("(BLOCK // 32) * 4", {"BLOCK": 256}, 32),
])
def test_arithmetic(text: str, env: dict, want: int) -> None:
    assert Expr(text).int_value(env) == want


@pytest.mark.parametrize(("text", "env", "want"), [
    ("BLOCK * UNROLL <= 4096", {"BLOCK": 1024, "UNROLL": 4}, True),
    ("BLOCK * UNROLL <= 4096", {"BLOCK": 1024, "UNROLL": 8}, False),
    ("TM * TN <= 64 and BM % TM == 0", {"TM": 8, "TN": 8, "BM": 64}, True),
    ("not (A == B) or A < B", {"A": 1, "B": 1}, False),
    ("1 < A < 3", {"A": 2}, True),
    ("1 < A < 3", {"A": 3}, False),
])
def test_conditions(text: str, env: dict, want: bool) -> None:
    assert Expr(text).holds(env) is want


def test_names_are_collected_without_functions() -> None:
    assert Expr("ceil_div(n, BLOCK) + min(x, 2)").names == {"n", "BLOCK", "x"}


def test_true_division_keeps_fractions_exact() -> None:
    assert Expr("1 / 3 * 3").value({}) == Fraction(1)
    with pytest.raises(SpecError, match="not an integer"):
        Expr("n / 3").int_value({"n": 10})


@pytest.mark.parametrize("hostile", [
    "__import__('os').system('true')",
    "open('/etc/passwd')",
    "x.__class__",
    "[1, 2][0]",
    "lambda: 1",
    "2 ** 4096",
    "'a' * 3",
    "eval('1')",
    "min(*a)",
    "max(a, key=b)",
    "a if b else c",
    "a @ b",
    "a << 3",
    "(yield)",
    "1j",
    "1e999",
    "99999999999999999999999999999",
    "",
    "1 +",
    "True",
    "{1: 2}",
    "f'{a}'",
])
def test_hostile_input_is_rejected_before_evaluation(hostile: str) -> None:
    with pytest.raises(SpecError):
        Expr(hostile).value({"a": 1, "b": 2, "c": 3, "x": 4})


def test_size_limits() -> None:
    with pytest.raises(SpecError, match="longer than"):
        Expr("1+" * MAX_LENGTH + "1")
    assert Expr("(" * 199 + "1" + ")" * 199).value({}) == 1  # the deepest nesting that fits
    with pytest.raises(SpecError, match="parts"):
        Expr("+".join(["a"] * 150))


def test_runtime_errors_are_spec_errors() -> None:
    with pytest.raises(SpecError, match="division by zero"):
        Expr("n // m").value({"n": 1, "m": 0})
    with pytest.raises(SpecError, match="unknown name 'zz'"):
        Expr("zz + 1").value({})
    with pytest.raises(SpecError, match="overflows"):
        Expr("a * a * a").value({"a": 2**40})
    with pytest.raises(SpecError, match="condition"):
        Expr("a < 1").int_value({"a": 0})
