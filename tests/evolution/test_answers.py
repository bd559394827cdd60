import pytest

from evolve.evolution.answers import AnswerError, apply_edits, child_source, code_block, parse_child
from evolve.paths import KERNELS_DIR

PARENT = (KERNELS_DIR / "softmax/naive.cu").read_text()


def fence(src: str, lang: str = "cuda") -> str:
    return f"Sure.\n```{lang}\n{src}```\nDone."


def edits(*blocks: tuple[str, str]) -> str:
    return "\n\n".join(f"<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE" for s, r in blocks)


def test_whole_kernel_from_a_code_block() -> None:
    assert child_source(fence(PARENT), PARENT) == PARENT
    v = parse_child(fence(PARENT, "cpp"), None, "c1")
    assert v.name == "c1" and v.spec.launches[0].kernel == "softmax_naive"


def test_the_block_with_the_launch_spec_wins() -> None:
    answer = fence("__device__ int helper();\n") + "\n" + fence(PARENT) + "\n" + fence("// notes\n", "text")
    assert code_block(answer) == PARENT


def test_exact_search_replace() -> None:
    out = apply_edits(PARENT, [("    float inv = 1.f / s;", "    float inv = __frcp_rn(s);")])
    assert "__frcp_rn(s)" in out and "1.f / s" not in out


def test_loose_match_restores_indentation() -> None:
    answer = edits(("float inv = 1.f / s;\nfor (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) * inv;",
                    "float inv = 1.f / s;\nfor (int c = 0; c < cols; ++c) yr[c] = __expf(xr[c] - m) * inv;"))
    out = child_source(answer, PARENT)
    assert "    for (int c = 0; c < cols; ++c) yr[c] = __expf(xr[c] - m) * inv;" in out
    assert parse_child(answer, PARENT, "x").id != parse_child(fence(PARENT), None, "y").id


@pytest.mark.parametrize(("answer", "message"), [
    ("", "empty"),
    ("I think you should use shared memory.", "no code block"),
    (edits(("this line is not in the parent", "x")), "does not match"),
    (edits(("++c", "++c ")), "matches 3 places"),
    (edits(("", "x")), "empty"),
    (fence("extern \"C\" __global__ void k() {}\n"), "launch spec"),
    (fence("/*@evolve\nkernels: [\n*/\n"), "launch spec is not valid"),
])
def test_unusable_answers_say_why(answer: str, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        parse_child(answer, PARENT, "x")


def test_edits_without_a_parent_are_refused() -> None:
    with pytest.raises(AnswerError, match="need a parent"):
        child_source(edits(("a", "b")), None)
