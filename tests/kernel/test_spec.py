import pytest

from evolve.errors import SpecError
from evolve.kernel.spec import MAX_SPACE, Variant, candidate_key, normalize_source, parse_spec

BODY = 'extern "C" __global__ void k(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1; }\n'
GOOD = """/*@evolve
kernels:
  - name: k
    grid: ceil_div(n, BLOCK * UNROLL)
    block: BLOCK
    args: [y, n]
tunables:
  BLOCK: {values: [256, 64, 128], default: 128}
  UNROLL: {values: [1, 2, 4], default: 1}
restrictions:
  - BLOCK * UNROLL <= 256
*/
""" + BODY


def test_parse_and_space() -> None:
    spec = parse_spec(GOOD)
    assert [t.name for t in spec.tunables] == ["BLOCK", "UNROLL"]
    assert spec.tunables[0].values == (64, 128, 256)  # sorted: ordinal for the samplers
    assert spec.default == {"BLOCK": 128, "UNROLL": 1}
    space = spec.space()
    assert {"BLOCK": 256, "UNROLL": 2} not in space
    assert len(space) == 3 + 2 + 1
    assert all(spec.is_valid(c) for c in space)


def test_identity_ignores_comments_and_whitespace_but_not_code() -> None:
    a = Variant.parse(GOOD)
    b = Variant.parse("// a comment\n" + GOOD.replace("int i =", "int   i =\n"))
    c = Variant.parse(GOOD.replace("y[i] = 1", "y[i] = 2"))
    d = Variant.parse(GOOD.replace("default: 128", "default: 64"))
    assert a.id == b.id
    assert len({a.id, c.id, d.id}) == 3


def test_normalize_keeps_string_literals() -> None:
    assert normalize_source('printf("/* x */ // y");  // gone') == 'printf("/* x */ // y");'


def test_with_defines_bakes_tunables_in() -> None:
    src = Variant.parse(GOOD).with_defines({"BLOCK": 64, "UNROLL": 2})
    assert src.startswith("#define BLOCK 64\n#define UNROLL 2\n")


def test_candidate_key_is_order_independent() -> None:
    assert candidate_key("v", {"A": 1, "B": 2}) == candidate_key("v", {"B": 2, "A": 1})


@pytest.mark.parametrize(("source", "message"), [
    (BODY, "no launch spec"),
    (GOOD + GOOD, "more than one"),
    ("/*@evolve\nkernels: [\n*/", "not valid YAML"),
    ("/*@evolve\n- 1\n*/", "mapping"),
    ("/*@evolve\nkernels: []\n*/", "non-empty"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: 1, args: []}]\nextra: 1\n*/", "unknown key"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: 1}]\n*/", "'args' is required"),
    ("/*@evolve\nkernels: [{name: 'k; system()', grid: 1, block: 1, args: []}]\n*/", "identifier"),
    ("/*@evolve\nkernels: [{name: k, grid: [1,1,1,1], block: 1, args: []}]\n*/", "1 to 3"),
    ("/*@evolve\nkernels: [{name: k, grid: __import__('os'), block: 1, args: []}]\n*/", "not allowed"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: 1, args: [{a: 1}]}]\n*/", "buffer name or"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: B, args: []}]\n"
     "tunables: {B: {values: [1, 2], default: 3}}\n*/", "default 3"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: B, args: []}]\n"
     "tunables: {B: {values: [1, 1], default: 1}}\n*/", "repeat"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: B, args: []}]\n"
     "tunables: {B: {values: [1.5], default: 1.5}}\n*/", "integers"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: B, args: []}]\n"
     "tunables: {B: {values: [1, 2], default: 2}}\nrestrictions: [C < 2]\n*/", "not tunables"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: B, args: []}]\n"
     "tunables: {B: {values: [1, 2], default: 2}}\nrestrictions: [B < 2]\n*/",
     "default tunables are invalid"),
    ("/*@evolve\nkernels: &a [{name: k, grid: 1, block: 1, args: []}]\nscratch: *a\n*/", "aliases"),
    ("/*@evolve\nkernels: [{name: k, grid: 1, block: 1, args: []}]\n"
     "scratch: {s: {dtype: complex128, size: 4}}\n*/", "dtype"),
])
def test_malformed_specs_have_clear_errors(source: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        Variant.parse(source)


def test_space_size_is_bounded() -> None:
    values = list(range(1, 60))
    tunables = "\n".join(f"  T{i}: {{values: {values}, default: 1}}" for i in range(4))
    src = f"/*@evolve\nkernels: [{{name: k, grid: 1, block: 1, args: []}}]\ntunables:\n{tunables}\n*/"
    with pytest.raises(SpecError, match=str(MAX_SPACE)):
        Variant.parse(src)


def test_expressions_with_commas_in_flow_lists_read_as_their_author_meant() -> None:
    """YAML splits ``[ceil_div(n, B), 1]`` at every comma: a real model's four answers for one task
    were all refused ("cannot parse expression 'ceil_div(dim2'"). An item whose parentheses do not
    close is joined with the next ones, in lists and in a scratch entry's flow mapping."""
    spec = parse_spec("""/*@evolve
kernels:
  - name: k
    grid: [ceil_div(n, BLOCK), min(4, max(1, n // BLOCK)), 1]
    block: [BLOCK, 1]
    args: [y, n, min(n, 7)]
scratch:
  part: {dtype: float32, size: ceil_div(n, BLOCK), zero: true}
tunables:
  BLOCK: {values: [64, 128], default: 64}
restrictions: [min(BLOCK, 96) >= 64]
*/
""" + BODY.replace("int n)", "int n, int m)"))
    k = spec.launches[0]
    assert [e.text for e in k.grid] == ["ceil_div(n, BLOCK)", "min(4, max(1, n // BLOCK))", "1"]
    assert k.args == ("y", "n", "min(n, 7)")
    assert spec.scratch[0].size.text == "ceil_div(n, BLOCK)" and spec.scratch[0].zero
    assert [r.text for r in spec.restrictions] == ["min(BLOCK, 96) >= 64"]
    with pytest.raises(SpecError, match="cannot parse expression"):
        parse_spec(GOOD.replace("grid: ceil_div(n, BLOCK * UNROLL)", "grid: [ceil_div(n, BLOCK]"))


def test_a_list_quoted_whole_is_that_list() -> None:
    """``grid: "[ceil_div(n, B), 2]"`` (a real model's answer to a KernelBench GEMM problem) was
    refused as "List is not allowed": no expression is a list, so a string that is one whole
    bracketed list reads as the list. A quoted expression stays one expression."""
    quoted = GOOD.replace("grid: ceil_div(n, BLOCK * UNROLL)",
                          'grid: "[ceil_div(n, BLOCK * UNROLL), min(2, n)]"')
    k = parse_spec(quoted).launches[0]
    assert [e.text for e in k.grid] == ["ceil_div(n, BLOCK * UNROLL)", "min(2, n)"]
    one = GOOD.replace("grid: ceil_div(n, BLOCK * UNROLL)", 'grid: "ceil_div(n, BLOCK * UNROLL)"')
    assert [e.text for e in parse_spec(one).launches[0].grid] == ["ceil_div(n, BLOCK * UNROLL)"]
    with pytest.raises(SpecError, match="1 to 3 expressions"):
        parse_spec(GOOD.replace("grid: ceil_div(n, BLOCK * UNROLL)", 'grid: "[1, 2, 3, 4]"'))
    with pytest.raises(SpecError, match="1 to 3 expressions"):
        parse_spec(GOOD.replace("grid: ceil_div(n, BLOCK * UNROLL)", 'grid: "[]"'))
