"""Paths as reports show them, and where installed code lives.

A path is shown relative to the current folder where it lies below it; a
module below :func:`installed_dirs` is a library's, never the user's (taken
out neither after an import nor after a check). Standard library only, below
everything that names a user's file or tells it from a library's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
from pathlib import Path


def display_path(path: Path, resolve: bool = True) -> str:
    """``path`` relative to the current directory where it lies below it (links followed unless not ``resolve``)."""
    resolved = path.resolve() if resolve else Path(os.path.abspath(path))
    try:
        return resolved.relative_to(Path.cwd().resolve() if resolve else Path(os.getcwd())).as_posix()
    except ValueError:
        return resolved.as_posix()


@functools.lru_cache(maxsize=1)
def installed_dirs() -> tuple[str, ...]:
    """Where installed libraries and the standard library live (resolved): never the user's own code."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            dirs.add(sysconfig.get_paths()[key])
    with contextlib.suppress(Exception):
        import site

        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    return tuple(str(Path(d).resolve()) for d in dirs if d)
