"""Reporters: each turns a finished :class:`~gradcheck.results.RunReport` into one format.

A reporter computes nothing: every number it shows is in the result records.
Each format is one module with one function, ``render(report, options) ->
str``; :func:`render` picks it from :data:`FORMATS`. The modules are imported
only when their format is asked for, so ``import gradcheck`` stays light.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from gradcheck.results import RunReport

FORMATS = ("text", "json", "junit", "github", "html", "sarif")
"""The report formats, as ``--format`` takes them."""

#: The module that renders each format; one entry per name in FORMATS.
_MODULES = {
    "text": "gradcheck.reporting.text",
    "json": "gradcheck.reporting.json_report",
    "junit": "gradcheck.reporting.junit",
    "github": "gradcheck.reporting.github",
    "html": "gradcheck.reporting.html",
    "sarif": "gradcheck.reporting.sarif",
}


@dataclass(frozen=True)
class RenderOptions:
    """How to render, where a format has a choice."""

    verbosity: int = 0
    """-1 for ``-q``, 0 by default, 1 for ``-v`` (the text report's level of detail)."""
    width: int = 100
    """Line width of the plain-text report written to a file."""


def render(report: RunReport, format_: str, options: RenderOptions | None = None) -> str:
    """The report as a document in ``format_`` (one of :data:`FORMATS`)."""
    if format_ not in _MODULES:
        raise ValueError(f"unknown report format {format_!r}; formats: {', '.join(FORMATS)}")
    module = importlib.import_module(_MODULES[format_])
    return module.render(report, options or RenderOptions())
