"""Just enough YAML to read the repository's own workflow and pre-commit files in tests.

YAML is no dependency of gradcheck; these files use block mappings and lists,
plain or quoted scalars and flow lists (``[a, b]``), and nothing else, which
this reader checks rather than guesses.
"""

from __future__ import annotations

import re
from typing import Any

_KEY = re.compile(r"^([A-Za-z0-9_.-]+):(?:\s+(.*))?$")


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(part) for part in inner.split(",")] if inner else []
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    return text


def _strip_comment(line: str) -> str:
    # A '#' starts a comment at the line's start or after a space, outside quotes.
    quote = None
    for i, char in enumerate(line):
        if char in "\"'" and quote in (None, char):
            quote = None if quote == char else char
        elif char == "#" and quote is None and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip()
    return line.rstrip()


def loads(text: str) -> Any:
    """The document as dicts, lists and strings (booleans for true/false)."""
    lines = [(len(raw) - len(raw.lstrip(" ")), raw.strip()) for raw in map(_strip_comment, text.splitlines())]
    lines = [(indent, body) for indent, body in lines if body]
    value, end = _block(lines, 0, lines[0][0])
    assert end == len(lines), f"unparsed line: {lines[end][1]!r}"
    return value


def _block(lines: list[tuple[int, str]], start: int, indent: int) -> tuple[Any, int]:
    if lines[start][1].startswith("- "):
        return _sequence(lines, start, indent)
    return _mapping(lines, start, indent)


def _sequence(lines: list[tuple[int, str]], start: int, indent: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    i = start
    while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
        rest = lines[i][1][2:]
        if _KEY.match(rest):
            # "- key: value" opens a mapping whose keys sit two columns in.
            lines[i] = (indent + 2, rest)
            value, i = _mapping(lines, i, indent + 2)
        else:
            value, i = _scalar(rest), i + 1
        items.append(value)
    return items, i


def _mapping(lines: list[tuple[int, str]], start: int, indent: int) -> tuple[dict[str, Any], int]:
    mapping: dict[str, Any] = {}
    i = start
    while i < len(lines) and lines[i][0] == indent:
        match = _KEY.match(lines[i][1])
        assert match, f"not a key: {lines[i][1]!r}"
        key, rest = match.group(1), match.group(2)
        i += 1
        if rest:
            mapping[key] = _scalar(rest)
        elif i < len(lines) and (lines[i][0] > indent or lines[i][1].startswith("- ")):
            mapping[key], i = _block(lines, i, lines[i][0])
        else:
            mapping[key] = None
    return mapping, i
