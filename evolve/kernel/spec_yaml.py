"""The launch spec's YAML: read as plain data with hostile input refused in one line, and its flow
collections as their author meant them.

YAML splits a flow list or mapping at every comma, the ones inside a call too: ``[ceil_div(n, B),
rows]`` reads as ``['ceil_div(n', 'B)', 'rows']``, and all four of a real model's answers for one
KernelBench problem were refused for it. An item whose parentheses do not close cannot be an
expression, so it is joined with the items after it until they do. A list quoted whole
(``grid: "[ceil_div(m, BM), ceil_div(n, BN)]"``, one of a real model's ten answers for another)
is the same list: no expression is a list.
"""

from __future__ import annotations

from typing import Any

import yaml

from evolve.errors import SpecError

MAX_YAML_DEPTH = 16  # nested mappings and lists in a spec (its schema needs four)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where present


def load_yaml(text: str, first_line: int) -> Any:
    """The spec's YAML as plain data; anything hostile (aliases, deep nesting, numbers Python
    refuses to convert) is a SpecError, never another exception."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_YAML_LOADER):  # stops at the first excess
            if isinstance(event, yaml.AliasEvent):
                raise SpecError("YAML aliases are not allowed in a launch spec")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise SpecError(f"launch spec is nested deeper than {MAX_YAML_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.load(text, Loader=_YAML_LOADER)  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        raise SpecError(f"launch spec is not valid YAML: {_yaml_reason(exc, first_line)}") from None
    except (RecursionError, MemoryError):
        raise SpecError("launch spec is nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise SpecError(f"launch spec holds a value that cannot be read ({exc.__class__.__name__}: "
                        f"{str(exc)[:200]})") from None


def _yaml_reason(exc: yaml.YAMLError, first_line: int) -> str:
    """The error and where it is in the source (the header's text starts at ``first_line``)."""
    first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return first
    column = mark.column + 1 + (len("/*@evolve") if mark.line == 0 else 0)
    return f"{getattr(exc, 'problem', None) or first} at line {first_line + mark.line}, column {column}"


def rejoined(items: Any) -> Any:
    """A YAML flow list as its author meant it: ``[ceil_div(n, B), rows, 1]`` is split at every
    comma, the one inside the call too (``'ceil_div(n'``, ``'B)'``); an item whose parentheses do
    not close cannot be an expression, so it is joined with the next ones until they do."""
    if not isinstance(items, list):
        return items
    out: list[Any] = []
    open_text: str | None = None
    for item in items:
        if open_text is not None:
            open_text = f"{open_text}, {item}"
            if _depth(open_text) <= 0:
                out.append(open_text)
                open_text = None
        elif isinstance(item, str) and _depth(item) > 0:
            open_text = item
        else:
            out.append(item)
    return out if open_text is None else [*out, open_text]


def unquoted_list(v: Any) -> Any:
    """A string that is a whole bracketed list, ``"[ceil_div(m, BM), n]"``, as that list (its items
    rejoined as above); anything else as it is."""
    if not isinstance(v, str):
        return v
    text = v.strip()
    if len(text) < 2 or text[0] != "[" or text[-1] != "]" or _depth(text[1:-1]) != 0:
        return v
    inner = text[1:-1].strip()
    return rejoined([item.strip() for item in inner.split(",")]) if inner else []


def rejoined_mapping(d: dict[Any, Any]) -> dict[Any, Any]:
    """A YAML flow mapping as its author meant it: ``{size: ceil_div(n, B), zero: false}`` reads as
    ``size: 'ceil_div(n'`` and a key ``'B)'`` without a value; such keys join the open value."""
    out: dict[Any, Any] = {}
    open_key: Any = None
    for key, value in d.items():
        if open_key is not None and value is None and isinstance(key, str):
            out[open_key] = f"{out[open_key]}, {key}"
            if _depth(out[open_key]) <= 0:
                open_key = None
            continue
        out[key] = value
        open_key = key if isinstance(value, str) and _depth(value) > 0 else None
    return out


def _depth(text: str) -> int:
    return text.count("(") - text.count(")") + text.count("[") - text.count("]")
