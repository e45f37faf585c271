"""Text from the user's code, made safe to show: no control characters, no CI commands, no markup.

Exception messages, function and variable names and paths come from code
that gradcheck does not own. Shown raw they can clear or retitle a terminal
(``\\x1b[2J``, OSC sequences), plant links (OSC 8), issue GitHub workflow
commands (a line starting with ``::``, or ``##[`` anywhere in a line, which
the runner reads on stdout and stderr), crash an encoder (a lone surrogate,
as ``os.fsdecode`` makes of a file name that is not UTF-8) or inject
Markdown and HTML into the job summary. Every human-readable format passes
user text through :func:`shown`; the job summary through :func:`markdown`.
Machine formats (JSON, SARIF data) keep the text as it is, escaped by their
serialiser.
"""

from __future__ import annotations

import html
import re

#: What GitHub's runner takes as a (legacy) command anywhere in a line.
_LEGACY_COMMAND = "##["
#: The same characters with the second ``#`` escaped as repr would write it: shows the text, is no command.
_LEGACY_SHOWN = "#\\x23["
#: A line that starts with ``::`` after optional whitespace is a workflow command to the runner.
_COMMAND_START = re.compile(r"^(\s*):(?=:)", re.MULTILINE)
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: ASCII punctuation that Markdown (CommonMark and GitHub's extensions) may read as syntax.
_MARKDOWN_PUNCTUATION = re.compile(r"([!\"#$'()*+,\-./:;=?@\[\\\]^_`{|}~])")


def _escaped(char: str) -> str:
    """One character as ``repr`` writes it inside a string: ``\\n``, ``\\x1b``, ``\\u202e``, ``\\ud800``."""
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _printable(text: str, keep_newlines: bool) -> str:
    if text.isprintable() and _LEGACY_COMMAND not in text:
        return text  # the common case, untouched
    # isprintable() is what repr() uses: it is False for C0 and C1 controls, DEL, surrogates,
    # noncharacters such as U+FFFE, format characters (bidi overrides) and unusual spaces.
    shown = "".join(
        char if char.isprintable() or char == " " or (keep_newlines and char == "\n") else _escaped(char)
        for char in text
    )
    return shown.replace(_LEGACY_COMMAND, _LEGACY_SHOWN)


def shown(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` as a person may see it in a terminal, a file or a page.

    Every character that ``repr`` would escape is escaped the same way
    (``\\x1b``, ``\\n``, ``\\ud800``), so the result is printable, one line
    (unless ``keep_newlines``), and encodes as UTF-8. ``##[`` shows as
    ``#\\x23[``, and a line that would start with ``::`` after blanks starts
    with ``\\x3a:``: neither is a GitHub workflow command.
    """
    result = _printable(str(text), keep_newlines)
    if "::" in result:
        result = _COMMAND_START.sub(r"\1\\x3a", result)
    return result


def cell(text: object) -> str:
    """:func:`shown`, with every ``::`` broken: a table may fold a cell so that any part starts a line."""
    return shown(text).replace("::", ":\\x3a")


def markdown(text: object) -> str:
    """``text`` shown literally in Markdown (GitHub's job summary), inline or in a table cell.

    Control characters are escaped as :func:`shown` does; ``&``, ``<`` and
    ``>`` become entities, so no HTML tag can open; every other ASCII
    punctuation mark is backslash-escaped, so no emphasis, link, code span
    or table pipe can open either.
    """
    escaped = _MARKDOWN_PUNCTUATION.sub(r"\\\1", shown(text))
    return escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def html_text(text: object) -> str:
    """``text`` shown literally inside raw HTML (such as a ``<pre>`` block of the job summary).

    Backticks become ``&#96;`` too: no line of the block can look like a code fence to a Markdown reader.
    """
    return html.escape(shown(text), quote=True).replace("`", "&#96;")
