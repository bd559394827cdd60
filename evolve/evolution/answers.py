"""Reading an LLM's answer: a whole kernel in a code block, or SEARCH/REPLACE edits of the parent.

Answers are data. Nothing here executes them; the result is only ever parsed as a launch spec
and handed to NVRTC. Every way an answer can be unusable becomes an ``AnswerError`` whose
message is fit to send back to the LLM.
"""

from __future__ import annotations

import re

from evolve.errors import SpecError
from evolve.kernel.spec import MAX_SOURCE_CHARS, Variant

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.S)
_BLOCK = re.compile(
    r"<{5,9}\s*SEARCH[^\n]*\n(.*?)\n?={5,9}[^\n]*\n(.*?)\n?>{5,9}\s*REPLACE", re.S
)


class AnswerError(Exception):
    """The answer cannot be used; the message says why, for the LLM and the record."""


def child_source(answer: str, parent: str | None) -> str:
    """The new source: applied SEARCH/REPLACE blocks if there are any, else the code block."""
    if not answer or not answer.strip():
        raise AnswerError("the answer is empty")
    blocks = _BLOCK.findall(answer)
    if blocks:
        if parent is None:
            raise AnswerError("SEARCH/REPLACE edits need a parent; answer with the whole kernel")
        return apply_edits(parent, blocks)
    code = code_block(answer)
    if len(code) > MAX_SOURCE_CHARS:
        raise AnswerError(f"the kernel is longer than {MAX_SOURCE_CHARS} characters")
    return code


def code_block(answer: str) -> str:
    """The fenced block holding the kernel: the last one with a launch spec, else the last one."""
    blocks = [body for _, body in _FENCE.findall(answer) if body.strip()]
    if not blocks:
        raise AnswerError("no code block: put the whole kernel in one ```cuda fenced block")
    with_spec = [b for b in blocks if "/*@evolve" in b]
    return (with_spec or blocks)[-1].strip("\n") + "\n"


def apply_edits(parent: str, blocks: list[tuple[str, str]]) -> str:
    """Apply each SEARCH/REPLACE in turn: exactly if possible, else ignoring indentation and
    trailing spaces line by line. A block that matches nowhere, or in several places, is an error."""
    source = parent
    for i, (search, replace) in enumerate(blocks, 1):
        if not search.strip():
            raise AnswerError(f"SEARCH block {i} is empty")
        count = source.count(search)
        if count == 1:
            source = source.replace(search, replace, 1)
            continue
        if count > 1:
            raise AnswerError(f"SEARCH block {i} matches {count} places; include more lines to pick one")
        source = _apply_loose(source, search, replace, i)
    return source


def _apply_loose(source: str, search: str, replace: str, i: int) -> str:
    lines = source.split("\n")
    want = [ln.strip() for ln in search.strip("\n").split("\n")]
    hits = [
        start for start in range(len(lines) - len(want) + 1)
        if [ln.strip() for ln in lines[start:start + len(want)]] == want
    ]
    if not hits:
        first = want[0][:80]
        raise AnswerError(
            f"SEARCH block {i} does not match the parent (first line: {first!r}); copy the lines "
            "exactly from the parent's source"
        )
    if len(hits) > 1:
        raise AnswerError(f"SEARCH block {i} matches {len(hits)} places; include more lines to pick one")
    start = hits[0]
    # The answer may have lost the parent's indentation: shift its lines by the difference.
    first = next(ln for ln in search.split("\n") if ln.strip())
    had = first[: len(first) - len(first.lstrip())]
    has = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    new = [
        has + ln[len(had):] if ln.startswith(had) and ln.strip() else ln
        for ln in replace.strip("\n").split("\n")
    ] if replace.strip() else []
    return "\n".join(lines[:start] + new + lines[start + len(want):])


def parse_child(answer: str, parent: str | None, name: str) -> Variant:
    """The variant an answer describes, or an AnswerError saying what to fix."""
    source = child_source(answer, parent)
    try:
        return Variant.parse(source, name=name)
    except SpecError as exc:
        raise AnswerError(f"the launch spec is not valid: {exc}") from None
