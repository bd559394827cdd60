"""A tiny whitelist evaluator for launch-spec arithmetic.

Kernel sources come from seeds written by people and, later, from an LLM: their launch
expressions are data. They are parsed with :mod:`ast` and walked here over a fixed set of
node types (numbers, names, ``+ - * / // %``, comparisons, ``and/or/not``, ``min``, ``max``,
``ceil_div``). Nothing is ever passed to ``eval``; sizes are bounded so hostile input cannot
exhaust memory or time.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from fractions import Fraction

from evolve.errors import SpecError

MAX_LENGTH = 400
MAX_NODES = 200
MAX_MAGNITUDE = 2**62

Number = int | Fraction
Env = Mapping[str, int]

_BINOPS: dict[type, Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CMPOPS: dict[type, Callable[[Number, Number], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def _ceil_div(a: Number, b: Number) -> Number:
    return -((-a) // b)


_FUNCS: dict[str, tuple[int, Callable[..., Number]]] = {
    "min": (-1, min),
    "max": (-1, max),
    "ceil_div": (2, _ceil_div),
}


class Expr:
    """A parsed expression; call :meth:`value` with the names it uses."""

    def __init__(self, text: str | int):
        self.text = str(text).strip()
        if not self.text:
            raise SpecError("empty expression")
        if len(self.text) > MAX_LENGTH:
            raise SpecError(f"expression longer than {MAX_LENGTH} characters")
        try:
            tree = ast.parse(self.text, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise SpecError(f"cannot parse expression {self.text!r}: {exc.__class__.__name__}") from None
        nodes = list(ast.walk(tree))
        if len(nodes) > MAX_NODES:
            raise SpecError(f"expression {self.text!r} has more than {MAX_NODES} parts")
        self._tree = tree.body
        self.size = len(nodes)  # the work of one evaluation, for bounds on enumerations
        self.names = frozenset(
            n.id for n in nodes if isinstance(n, ast.Name) and n.id not in _FUNCS
        )
        self._check(self._tree)

    def _check(self, node: ast.AST) -> None:
        """Reject every construct outside the whitelist before anything is evaluated."""
        match node:
            case ast.Constant(value=v):
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise SpecError(f"only numbers are allowed in {self.text!r}, not {v!r}")
                if not abs(v) <= MAX_MAGNITUDE:  # also catches inf and nan
                    raise SpecError(f"number out of range in {self.text!r}")
            case ast.Name():
                pass
            case ast.BinOp(left=a, op=op, right=b):
                if type(op) not in _BINOPS and not isinstance(op, ast.Div):
                    raise SpecError(f"operator {type(op).__name__} not allowed in {self.text!r}")
                self._check(a)
                self._check(b)
            case ast.UnaryOp(op=ast.USub() | ast.UAdd() | ast.Not(), operand=a):
                self._check(a)
            case ast.BoolOp(values=vs):
                for v in vs:
                    self._check(v)
            case ast.Compare(left=a, ops=ops, comparators=cs):
                if any(type(op) not in _CMPOPS for op in ops):
                    raise SpecError(f"comparison not allowed in {self.text!r}")
                self._check(a)
                for c in cs:
                    self._check(c)
            case ast.Call(func=ast.Name(id=fname), args=args, keywords=[]) if fname in _FUNCS:
                arity = _FUNCS[fname][0]
                if (arity >= 0 and len(args) != arity) or (arity < 0 and not args):
                    raise SpecError(f"wrong number of arguments to {fname} in {self.text!r}")
                for a in args:
                    self._check(a)
            case _:
                raise SpecError(f"{type(node).__name__} is not allowed in {self.text!r}")

    def value(self, env: Env) -> Number | bool:
        missing = self.names - env.keys()
        if missing:
            raise SpecError(f"unknown name {sorted(missing)[0]!r} in {self.text!r}")
        try:
            return self._eval(self._tree, env)
        except ZeroDivisionError:
            raise SpecError(f"division by zero in {self.text!r}") from None

    def int_value(self, env: Env) -> int:
        """The value as an integer; a fractional result is an error, not a silent floor."""
        v = self.value(env)
        if isinstance(v, bool):
            raise SpecError(f"{self.text!r} is a condition, not a number")
        if isinstance(v, Fraction):
            if v.denominator != 1:
                raise SpecError(f"{self.text!r} = {float(v):g} is not an integer (use // or ceil_div)")
            v = v.numerator
        return int(v)

    def holds(self, env: Env) -> bool:
        return bool(self.value(env))

    def _eval(self, node: ast.AST, env: Env) -> Number | bool:
        match node:
            case ast.Constant(value=v):
                return v if isinstance(v, int) else Fraction(v)
            case ast.Name(id=name):
                return env[name]
            case ast.BinOp(left=a, op=ast.Div(), right=b):
                result: Number | bool = Fraction(self._eval(a, env)) / Fraction(self._eval(b, env))
            case ast.BinOp(left=a, op=op, right=b):
                result = _BINOPS[type(op)](self._eval(a, env), self._eval(b, env))
            case ast.UnaryOp(op=ast.USub(), operand=a):
                result = -self._eval(a, env)
            case ast.UnaryOp(op=ast.UAdd(), operand=a):
                result = self._eval(a, env)
            case ast.UnaryOp(op=ast.Not(), operand=a):
                return not self._eval(a, env)
            case ast.BoolOp(op=ast.And(), values=vs):
                return all(self._eval(v, env) for v in vs)
            case ast.BoolOp(op=ast.Or(), values=vs):
                return any(self._eval(v, env) for v in vs)
            case ast.Compare(left=a, ops=ops, comparators=cs):
                left = self._eval(a, env)
                for op, c in zip(ops, cs, strict=True):
                    right = self._eval(c, env)
                    if not _CMPOPS[type(op)](left, right):
                        return False
                    left = right
                return True
            case ast.Call(func=ast.Name(id=fname), args=args):
                result = _FUNCS[fname][1](*(self._eval(a, env) for a in args))
            case _:  # unreachable: _check rejected it
                raise SpecError(f"cannot evaluate {self.text!r}")
        if abs(result) > MAX_MAGNITUDE:
            raise SpecError(f"{self.text!r} overflows")
        return result

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"
