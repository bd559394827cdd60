"""The launch spec: how a kernel variant is launched and which knobs it exposes.

A variant is CUDA device code with one header comment ``/*@evolve ... */`` holding YAML::

    /*@evolve
    kernels:                       # launched in this order, every call
      - name: softmax_rows         # an extern "C" __global__ function in the source
        grid: rows                 # expression, or a list of up to three
        block: BLOCK
        shared: (BLOCK // 32) * 4  # dynamic shared memory in bytes (default 0)
        args: [x, y, rows, cols]   # task buffers, scratch buffers, or int32 expressions
    scratch:                       # device buffers the harness allocates (optional)
      partial: {dtype: float32, size: "ceil_div(n, BLOCK)", zero: true}
    tunables:                      # reach the code as -D macros
      BLOCK: {values: [64, 128, 256, 512], default: 256}
    restrictions:                  # must hold for a configuration to be tried
      - BLOCK * UNROLL <= 4096
    arch_specific: false           # true: compile for the GPU's arch-specific target (sm_90a)
    */

Hopper kernels may also declare ``tensor_maps`` (TMA maps over task arguments that the harness
encodes and passes by value where ``args`` name them) and a ``cluster`` per launch: see docs/launch-spec.md.

Expressions use :mod:`evolve.expr` over the task's sizes and the tunables. Quote an expression
that contains a comma inside ``[...]`` or ``{...}`` (YAML would split it there). The harness owns
memory, launches and synchronization; the spec only says what to launch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from evolve.dtypes import ITEMSIZE
from evolve.errors import SpecError
from evolve.expr import Expr
from evolve.kernel.spec_yaml import load_yaml, rejoined, rejoined_mapping, unquoted_list
from evolve.kernel.tensor_maps import TensorMapDecl, declare

MAX_SOURCE_CHARS = 100_000
MAX_SPEC_CHARS = 16_000
MAX_KERNELS = 8
MAX_TUNABLES = 12
DEVICE_NAMES = ("SMS",)  # what launch expressions may read of the GPU (the plan binds it): multiprocessors
MAX_VALUES = 64
MAX_SPACE = 200_000
MAX_RESTRICTIONS = 32
MAX_TENSOR_MAPS = 8
# Enumerating the space evaluates every restriction at every configuration: the search process
# bounds that work (configurations x restriction terms), not only the number of configurations.
MAX_ENUMERATION = 2_000_000
DTYPES = ITEMSIZE  # bytes per element of each dtype a scratch buffer (or task argument) may have

# An unterminated comment runs to the end: one scan, however many openers there are.
_HEADER = re.compile(r"/\*@evolve\b(.*?)(\*/|\Z)", re.S)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
COMMENT_OR_STRING = re.compile(
    r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S
)
_RESERVED = {"min", "max", "ceil_div", "and", "or", "not"}


@dataclass(frozen=True)
class Tunable:
    name: str
    values: tuple[int, ...]
    default: int


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[Expr, ...]
    block: tuple[Expr, ...]
    shared: Expr
    args: tuple[str, ...]
    cluster: tuple[Expr, ...] | None = None  # thread-block cluster dims (sm_90+), None: no cluster


@dataclass(frozen=True)
class Scratch:
    name: str
    dtype: str
    size: Expr
    zero: bool


@dataclass(frozen=True)
class LaunchSpec:
    launches: tuple[Launch, ...]
    scratch: tuple[Scratch, ...]
    tunables: tuple[Tunable, ...]
    restrictions: tuple[Expr, ...]
    raw: Mapping[str, Any]
    # compiled for the arch-specific target of the GPU (sm_90 -> sm_90a), whose instructions
    # (wgmma, setmaxnreg) run on that architecture alone; see evolve.kernel.compiler.target_arch
    arch_specific: bool = False
    tensor_maps: tuple[TensorMapDecl, ...] = ()

    @property
    def default(self) -> dict[str, int]:
        return {t.name: t.default for t in self.tunables}

    def is_valid(self, tunables: Mapping[str, int]) -> bool:
        return all(r.holds(tunables) for r in self.restrictions)

    def check(self, tunables: Mapping[str, int]) -> None:
        """Raise a SpecError naming what is wrong with a configuration."""
        names = {t.name for t in self.tunables}
        if set(tunables) != names:
            raise SpecError(f"tunables {sorted(tunables)} do not match the spec's {sorted(names)}")
        for t in self.tunables:
            if tunables[t.name] not in t.values:
                raise SpecError(f"{t.name}={tunables[t.name]} is not one of {list(t.values)}")
        for r in self.restrictions:
            if not r.holds(tunables):
                raise SpecError(f"restriction {r.text!r} does not hold for {dict(tunables)}")

    def space(self) -> list[dict[str, int]]:
        """Every valid configuration, in a stable order."""
        names = [t.name for t in self.tunables]
        return [
            cfg
            for combo in itertools.product(*(t.values for t in self.tunables))
            if self.is_valid(cfg := dict(zip(names, combo, strict=True)))
        ]

    def canonical(self) -> str:
        return json.dumps(self.raw, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Variant:
    """CUDA source plus its parsed spec; ``id`` is stable under comment/whitespace edits."""

    source: str
    spec: LaunchSpec
    id: str
    name: str

    @classmethod
    def parse(cls, source: str, name: str = "") -> Variant:
        spec = parse_spec(source)
        digest = hashlib.sha256(
            (normalize_source(source) + "\n" + spec.canonical()).encode()
        ).hexdigest()[:12]
        return cls(source=source, spec=spec, id=digest, name=name or digest)

    def with_defines(self, tunables: Mapping[str, int],
                     defines: Iterable[tuple[str, str]] = ()) -> str:
        """The source with its tunables (and the task's defines) baked in, compilable without -D
        flags."""
        lines = [f"#define {k} {v}" for k, v in [*sorted(tunables.items()), *defines]]
        return "\n".join([*lines, self.source])


CandidateKey = tuple[str, tuple[tuple[str, int], ...]]


def candidate_key(variant_id: str, tunables: Mapping[str, int]) -> CandidateKey:
    """Identity of a candidate: its variant and its tunables, in a hashable form."""
    return variant_id, tuple(sorted(tunables.items()))


def normalize_source(source: str) -> str:
    """Source without comments and with whitespace collapsed: the identity of the code."""

    def keep_strings(m: re.Match[str]) -> str:
        return m.group(0) if m.group(0)[0] in "\"'" else " "

    return " ".join(COMMENT_OR_STRING.sub(keep_strings, source).split())


def parse_spec(source: str) -> LaunchSpec:
    if len(source) > MAX_SOURCE_CHARS:
        raise SpecError(f"the source is longer than {MAX_SOURCE_CHARS} characters")
    headers = list(_HEADER.finditer(source))
    if not headers:
        raise SpecError("no launch spec: the source needs one /*@evolve ... */ header comment")
    if len(headers) > 1:
        raise SpecError("more than one /*@evolve ... */ header comment")
    text, end = headers[0].group(1, 2)
    if not end:
        raise SpecError("the /*@evolve header comment is not closed with */")
    if len(text) > MAX_SPEC_CHARS:
        raise SpecError(f"launch spec longer than {MAX_SPEC_CHARS} characters")
    raw = load_yaml(text, first_line=source.count("\n", 0, headers[0].start(1)) + 1)
    if not isinstance(raw, dict):
        raise SpecError("launch spec must be a YAML mapping with 'kernels' and 'tunables'")
    _only_keys(raw, {"kernels", "scratch", "tunables", "restrictions", "arch_specific", "tensor_maps"},
               "spec")
    arch_specific = raw.get("arch_specific", False)
    if not isinstance(arch_specific, bool):
        raise SpecError("'arch_specific' must be true or false")

    tunables = tuple(_tunable(n, t) for n, t in _mapping(raw.get("tunables") or {}, "tunables").items())
    if len(tunables) > MAX_TUNABLES:
        raise SpecError(f"at most {MAX_TUNABLES} tunables")
    scratch = tuple(_scratch(n, s) for n, s in _mapping(raw.get("scratch") or {}, "scratch").items())
    kernels = raw.get("kernels")
    if not isinstance(kernels, list) or not kernels:
        raise SpecError("'kernels' must be a non-empty list")
    if len(kernels) > MAX_KERNELS:
        raise SpecError(f"at most {MAX_KERNELS} kernel launches")
    launches = tuple(_launch(i, k) for i, k in enumerate(kernels))
    maps = _tensor_maps(raw.get("tensor_maps") or [])
    restrictions = rejoined(raw.get("restrictions") or [])
    if not isinstance(restrictions, list) or len(restrictions) > MAX_RESTRICTIONS:
        raise SpecError(f"'restrictions' must be a list of at most {MAX_RESTRICTIONS} conditions")
    if any(isinstance(r, bool | dict | list) or r is None for r in restrictions):
        raise SpecError("each restriction must be a condition over the tunables, e.g. BLOCK * UNROLL <= 4096")
    restr = tuple(Expr(r) for r in restrictions)

    tnames = {t.name for t in tunables}
    if reserved := tnames & set(DEVICE_NAMES):
        raise SpecError(f"tunable {sorted(reserved)[0]!r} has the name of a device property")
    for r in restr:
        if unknown := r.names - tnames:
            raise SpecError(f"restriction {r.text!r} uses {sorted(unknown)}, which are not tunables")
    if clash := tnames & {s.name for s in scratch}:
        raise SpecError(f"{sorted(clash)} are both tunables and scratch buffers")
    if clash := {m.name for m in maps} & (tnames | {s.name for s in scratch}):
        raise SpecError(f"tensor map {sorted(clash)[0]!r} has the name of a tunable or scratch buffer")
    space = 1
    for t in tunables:
        space *= len(t.values)
    if space > MAX_SPACE:
        raise SpecError(f"search space of {space} configurations exceeds {MAX_SPACE}")
    work = space * sum(r.size for r in restr)
    if work > MAX_ENUMERATION:
        raise SpecError(f"search space of {space} configurations times {sum(r.size for r in restr)} "
                        f"restriction terms is too costly to enumerate (limit {MAX_ENUMERATION}); "
                        "use fewer values or simpler restrictions")
    spec = LaunchSpec(launches, scratch, tunables, restr, raw, arch_specific, maps)
    try:
        spec.check(spec.default)
    except SpecError as exc:
        raise SpecError(f"default tunables are invalid: {exc}") from None
    return spec


def _only_keys(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = set(map(str, d)) - allowed
    if extra:
        raise SpecError(f"unknown key(s) {sorted(extra)} in {where}; allowed: {sorted(allowed)}")


def _mapping(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise SpecError(f"'{where}' must be a mapping")
    return v


def _ident(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _IDENT.match(name) or name in _RESERVED:
        raise SpecError(f"{what} name {name!r} is not a valid identifier")
    return name


def _exprs(v: Any, where: str) -> tuple[Expr, ...]:
    v = unquoted_list(v)
    items = rejoined(v) if isinstance(v, list) else [v]
    if not 1 <= len(items) <= 3 or any(isinstance(i, bool | dict | list) or i is None for i in items):
        raise SpecError(f"{where} must be an expression or a list of 1 to 3 expressions")
    return tuple(Expr(i) for i in items)


def _tunable(name: Any, t: Any) -> Tunable:
    name = _ident(name, "tunable")
    if not isinstance(t, dict):
        raise SpecError(f"tunable {name} must be a mapping {{values: [...], default: ...}}")
    _only_keys(t, {"values", "default"}, f"tunable {name}")
    values = t.get("values")
    if not isinstance(values, list) or not values or len(values) > MAX_VALUES:
        raise SpecError(f"tunable {name}: 'values' must be a list of 1 to {MAX_VALUES} integers")
    if any(isinstance(v, bool) or not isinstance(v, int) or abs(v) > 2**31 for v in values):
        raise SpecError(f"tunable {name}: values must be integers")
    if len(set(values)) != len(values):
        raise SpecError(f"tunable {name}: values repeat")
    default = t.get("default", None)
    if default not in values:
        raise SpecError(f"tunable {name}: default {default!r} is not one of its values")
    return Tunable(name, tuple(sorted(values)), default)


def _scratch(name: Any, s: Any) -> Scratch:
    name = _ident(name, "scratch")
    if not isinstance(s, dict):
        raise SpecError(f"scratch {name} must be a mapping {{dtype, size, zero}}")
    s = rejoined_mapping(s)
    _only_keys(s, {"dtype", "size", "zero"}, f"scratch {name}")
    dtype = s.get("dtype", "float32")
    if dtype not in DTYPES:
        raise SpecError(f"scratch {name}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if "size" not in s:
        raise SpecError(f"scratch {name}: 'size' (elements) is required")
    zero = s.get("zero", False)
    if not isinstance(zero, bool):
        raise SpecError(f"scratch {name}: 'zero' must be true or false")
    return Scratch(name, dtype, Expr(s["size"]), zero)


def _launch(i: int, k: Any) -> Launch:
    where = f"kernels[{i}]"
    if not isinstance(k, dict):
        raise SpecError(f"{where} must be a mapping with name, grid, block, args")
    _only_keys(k, {"name", "grid", "block", "shared", "args", "cluster"}, where)
    for key in ("name", "grid", "block", "args"):
        if key not in k:
            raise SpecError(f"{where}: '{key}' is required")
    args = rejoined(k["args"])
    if not isinstance(args, list) or len(args) > 32:
        raise SpecError(f"{where}: 'args' must be a list (at most 32)")
    for a in args:
        if isinstance(a, bool) or not isinstance(a, str | int):
            raise SpecError(f"{where}: argument {a!r} must be a buffer name or an expression")
        Expr(a)  # every argument must at least parse
    return Launch(
        kernel=_ident(k["name"], "kernel"),
        grid=_exprs(k["grid"], f"{where}.grid"),
        block=_exprs(k["block"], f"{where}.block"),
        shared=Expr(k.get("shared", 0)),
        args=tuple(str(a) for a in args),
        cluster=_exprs(k["cluster"], f"{where}.cluster") if "cluster" in k else None,
    )


def _tensor_maps(v: Any) -> tuple[TensorMapDecl, ...]:
    if not isinstance(v, list) or len(v) > MAX_TENSOR_MAPS:
        raise SpecError(f"'tensor_maps' must be a list of at most {MAX_TENSOR_MAPS} mappings")
    maps: dict[str, TensorMapDecl] = {}
    for i, m in enumerate(v):
        if not isinstance(m, dict):
            raise SpecError(f"tensor_maps[{i}] must be a mapping {{name, buffer, box, swizzle, when}}")
        _only_keys(m, {"name", "buffer", "box", "swizzle", "when"}, f"tensor_maps[{i}]")
        if missing := [key for key in ("name", "buffer", "box") if key not in m]:
            raise SpecError(f"tensor_maps[{i}]: '{missing[0]}' is required")
        name = _ident(m["name"], "tensor map")
        if name in maps:
            raise SpecError(f"tensor map {name!r} is declared twice")
        maps[name] = declare(name, _ident(m["buffer"], f"tensor map {name}: buffer"), m["box"],
                             m.get("swizzle", "none"), m.get("when"))
    return tuple(maps.values())


def iter_names(spec: LaunchSpec) -> Iterator[str]:
    """Every name the spec's launch expressions refer to (for binding checks)."""
    maps = {m.name for m in spec.tensor_maps}
    for launch in spec.launches:
        for e in (*launch.grid, *launch.block, launch.shared, *(launch.cluster or ())):
            yield from e.names
        for a in launch.args:
            yield from Expr(a).names - maps
    for s in spec.scratch:
        yield from s.size.names
    for m in spec.tensor_maps:
        yield m.buffer
        for e in (*m.box, m.swizzle, *([m.when] if m.when else [])):
            yield from e.names
