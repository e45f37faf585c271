"""The JSON report, exactly as the guide documents it (docs/ci.md, "The JSON report")."""

from __future__ import annotations

import json
import math
from typing import Any

from gradcheck.reporting import RenderOptions
from gradcheck.results import RunReport


def _finite(value: Any) -> Any:
    # JSON has no Infinity or NaN; a reader would choke on Python's extension.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def render_json(report: RunReport) -> str:
    """The report as a JSON document, with a trailing newline."""
    return json_document(_finite(report.to_dict()))


def json_document(data: Any, ensure_ascii: bool = True) -> str:
    """``data`` as indented JSON with a trailing newline, safe on a CI runner's standard output.

    GitHub's runner takes ``##[`` anywhere in a line as a command, also inside
    a JSON string; written as ``#\\u0023[`` it decodes to the same text and is
    no command. (A line cannot start with ``::``: every string is quoted.)
    """
    return json.dumps(data, indent=2, ensure_ascii=ensure_ascii).replace("##[", "#\\u0023[") + "\n"


def render(report: RunReport, options: RenderOptions) -> str:
    """The JSON report (the same whatever the options)."""
    return render_json(report)
