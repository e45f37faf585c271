"""Paths as reports show them: relative to the current folder where they lie below it.

Standard library only, below everything that names a user's file in a
message or a report.
"""

from __future__ import annotations

import os
from pathlib import Path


def display_path(path: Path, resolve: bool = True) -> str:
    """``path`` relative to the current directory where it lies below it (links followed unless not ``resolve``)."""
    resolved = path.resolve() if resolve else Path(os.path.abspath(path))
    try:
        return resolved.relative_to(Path.cwd().resolve() if resolve else Path(os.getcwd())).as_posix()
    except ValueError:
        return resolved.as_posix()
