"""Text that comes from a candidate, the compiler, the model or a task, shown in Markdown (which
renderers turn into HTML) as data: it can neither become markup (an ``<img>`` that loads a URL, an
image, a link, a heading, a table cell of its own) nor, in a prompt, pass for instructions.

- ``md_text``: inline text with every character that Markdown or HTML give a meaning escaped
  (one line by default, for table cells and list items);
- ``md_code``: a fenced block whose fence is longer than any backtick run inside, so nothing in
  the text can close it (a block's content is shown verbatim, never rendered);
- ``c_comment``: text for a ``//`` comment of a CUDA file (``best.cu``'s header), which no line
  break can end and no trailing backslash can splice onto the next line of code.
"""

from __future__ import annotations

import re

_BACKTICKS = re.compile(r"`+")
# Numeric character references, not backslashes: every renderer (CommonMark, GFM, Python-Markdown)
# reads them as the character, while backslash escapes differ between them. Only what can start
# markup is replaced, so names like block_row and reasons like "kernel.cu(12): error" stay readable:
# HTML and references (& < >), links and images ([ ]), code (`), emphasis and strikethrough (* ~),
# table cells (|), escapes (\\), e-mail autolinks (@)
_ALWAYS = {ord(c): f"&#{ord(c)};" for c in "[]`*|~\\@"} | {ord("&"): "&amp;", ord("<"): "&lt;",
                                                        ord(">"): "&gt;"}
_CONTROL = {c: " " for c in [*range(32), 127, 0x85, 0x2028, 0x2029] if c != 10}
_ONE_LINE = {**_ALWAYS, **_CONTROL, 10: " "}
_LINES = {**_ALWAYS, **_CONTROL}
_AUTOLINK_OR_EMPHASIS = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|:(?=//)|(?<=[wW]{3})\.")
_LINE_START = re.compile(r"(?m)^([ \t]*)([#+=-]|\d{1,9}(?=[.)]))([.)]?)")  # headings, lists, rules


def _entity(m: re.Match[str]) -> str:
    return f"&#{ord(m[0])};"


def _line_start(m: re.Match[str]) -> str:
    lead, mark, dot = m[1], m[2], m[3]
    if mark.isdigit():  # an ordered list: the number stays, its dot or parenthesis goes
        return f"{lead}{mark}&#{ord(dot)};"
    return f"{lead}&#{ord(mark)};{dot}"


def md_text(text: object, one_line: bool = True) -> str:
    """``text`` as literal Markdown/HTML text; with ``one_line`` its line breaks become spaces."""
    out = str(text).translate(_ONE_LINE if one_line else _LINES)
    return _LINE_START.sub(_line_start, _AUTOLINK_OR_EMPHASIS.sub(_entity, out))


def fence(text: str, minimum: int = 3) -> str:
    """A backtick fence longer than any backtick run in ``text``."""
    return "`" * max(minimum, 1 + max((len(r) for r in _BACKTICKS.findall(text)), default=0))


def md_code(text: str, info: str = "text", minimum: int = 3) -> str:
    """``text`` as a fenced block that nothing inside it can close."""
    f = fence(text, minimum)
    return f"{f}{info}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{f}"


# line breaks (C's and Unicode's) and the backslash, whose splice would comment out the next line;
# C++17, NVRTC's dialect, has no trigraphs (??/ is no backslash there)
_C_COMMENT = {**_CONTROL, 10: " ", ord("\\"): "/"}


def c_comment(text: object) -> str:
    """``text`` as the body of a ``//`` comment: one line that ends where the comment does."""
    return str(text).translate(_C_COMMENT)
