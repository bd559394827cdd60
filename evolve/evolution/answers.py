"""Reading an LLM's answer: a whole kernel in a code block, or SEARCH/REPLACE edits of the parent.

Answers are data. Nothing here executes them; the result is only ever parsed as a launch spec
and handed to NVRTC. Every way an answer can be unusable becomes an ``AnswerError`` whose
message is fit to send back to the LLM. Parsing is linear in the answer's length (``str.find``
and one pass over its lines, no backtracking regex), and bounded: an answer of the largest size a
provider accepts is read in well under a second, whatever it holds.
"""

from __future__ import annotations

import re

from evolve.errors import SpecError
from evolve.kernel.spec import MAX_SOURCE_CHARS, Variant

MAX_ANSWER_CHARS = 1 << 20  # what a provider accepts at most (the mailbox's MAX_ANSWER_BYTES)
MAX_EDITS = 100  # SEARCH/REPLACE blocks in one answer; each is applied to the whole source
FENCE = "```"
# one marker per line, anchored at its start: each line is matched once, in time linear in its length
_OPEN = re.compile(r"[ \t]*<{5,9}[ \t]*SEARCH")
_SPLIT = re.compile(r"[ \t]*={5,}")
_CLOSE = re.compile(r"[ \t]*>{5,9}[ \t]*REPLACE")


class AnswerError(Exception):
    """The answer cannot be used; the message says why, for the LLM and the record."""


def child_source(answer: str, parent: str | None) -> str:
    """The new source: applied SEARCH/REPLACE blocks if there are any, else the code block."""
    if not isinstance(answer, str) or not answer.strip():
        raise AnswerError("the answer is empty")
    if len(answer) > MAX_ANSWER_CHARS:
        raise AnswerError(f"the answer is longer than {MAX_ANSWER_CHARS} characters")
    try:
        answer.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, possible in a JSON-decoded answer
        raise AnswerError(f"the answer is not valid text: a lone surrogate "
                          f"(U+{ord(answer[exc.start]):04X}) at character {exc.start}") from None
    blocks = edit_blocks(answer)
    if blocks:
        if parent is None:
            raise AnswerError("SEARCH/REPLACE edits need a parent; answer with the whole kernel")
        code = apply_edits(parent, blocks)
    else:
        code = code_block(answer)
    if len(code) > MAX_SOURCE_CHARS:
        raise AnswerError(f"the kernel is longer than {MAX_SOURCE_CHARS} characters")
    if "\0" in code:
        raise AnswerError("the kernel contains a NUL character")
    return code


def fenced_blocks(answer: str) -> list[str]:
    """The bodies of the answer's ``` blocks, in order: from the line after an opening ``` (its
    info string ignored) to the next ```. One forward pass: each search starts where the last ended."""
    bodies, pos = [], 0
    while (start := answer.find(FENCE, pos)) >= 0:
        line_end = answer.find("\n", start)
        if line_end < 0:
            break
        end = answer.find(FENCE, line_end + 1)
        if end < 0:
            break  # no later opening could be closed either
        bodies.append(answer[line_end + 1:end])
        pos = end + len(FENCE)
    return bodies


def code_block(answer: str) -> str:
    """The fenced block holding the kernel: the last one with a launch spec, else the last one."""
    blocks = [body for body in fenced_blocks(answer) if body.strip()]
    if not blocks:
        raise AnswerError("no code block: put the whole kernel in one ```cuda fenced block")
    with_spec = [b for b in blocks if "/*@evolve" in b]
    return (with_spec or blocks)[-1].strip("\n") + "\n"


def edit_blocks(answer: str) -> list[tuple[str, str]]:
    """The (search, replace) pairs of the answer's complete ``<<<<<<< SEARCH`` / ``=======`` /
    ``>>>>>>> REPLACE`` blocks, markers each on a line of their own. An opener inside an unfinished
    block starts the block again; an unfinished block is ignored (the answer may be a code block)."""
    blocks: list[tuple[str, str]] = []
    search: list[str] | None = None
    replace: list[str] | None = None
    for line in answer.split("\n"):
        if _OPEN.match(line):
            search, replace = [], None
        elif search is None:
            continue
        elif replace is None:
            if _SPLIT.match(line):
                replace = []
            else:
                search.append(line)
        elif _CLOSE.match(line):
            blocks.append(("\n".join(search), "\n".join(replace)))
            if len(blocks) > MAX_EDITS:
                raise AnswerError(f"more than {MAX_EDITS} SEARCH/REPLACE blocks; "
                                  "answer with the whole kernel")
            search = replace = None
        else:
            replace.append(line)
    return blocks


def apply_edits(parent: str, blocks: list[tuple[str, str]]) -> str:
    """Apply each SEARCH/REPLACE in turn: exactly if possible, else ignoring indentation and
    trailing spaces line by line. A block that matches nowhere, or in several places, is an error,
    and so is a source growing past MAX_SOURCE_CHARS (each block costs a pass over the source)."""
    source = parent
    for i, (search, replace) in enumerate(blocks, 1):
        if not search.strip():
            raise AnswerError(f"SEARCH block {i} is empty")
        count = source.count(search)
        if count == 1:
            source = source.replace(search, replace, 1)
        elif count > 1:
            raise AnswerError(f"SEARCH block {i} matches {count} places; include more lines to pick one")
        else:
            source = _apply_loose(source, search, replace, i)
        if len(source) > MAX_SOURCE_CHARS:
            raise AnswerError(f"after SEARCH block {i} the kernel is longer than "
                              f"{MAX_SOURCE_CHARS} characters")
    return source


def _apply_loose(source: str, search: str, replace: str, i: int) -> str:
    lines = source.split("\n")
    want = [ln.strip() for ln in search.strip("\n").split("\n")]
    # the stripped lines joined by newlines: a match of the needle is a match of whole lines
    hay = "\n" + "\n".join(ln.strip() for ln in lines) + "\n"
    needle = "\n" + "\n".join(want) + "\n"
    at = hay.find(needle)
    if at < 0:
        first = want[0][:80]
        raise AnswerError(
            f"SEARCH block {i} does not match the parent (first line: {first!r}); copy the lines "
            "exactly from the parent's source"
        )
    if hay.find(needle, at + 1) >= 0:
        raise AnswerError(f"SEARCH block {i} matches several places; include more lines to pick one")
    start = hay.count("\n", 0, at)
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
