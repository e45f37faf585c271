"""The JSON report, exactly as the README documents it."""

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
    return json.dumps(_finite(report.to_dict()), indent=2) + "\n"


def render(report: RunReport, options: RenderOptions) -> str:
    """The JSON report (the same whatever the options)."""
    return render_json(report)
