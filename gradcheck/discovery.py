"""Command-line targets -> the files they stand for.

A target is a ``.py`` file, a directory of them, or a dotted module name,
with an optional ``::NAME`` selector. Directories and packages are walked
through :mod:`gradcheck.walk` (read, never imported); importing the files
is :mod:`gradcheck.importing`'s, and finding the custom gradients in the
imported modules is :mod:`gradcheck.subjects`'.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradcheck import walk as walking
from gradcheck.errors import TargetError
from gradcheck.importing import import_context
from gradcheck.results import split_id

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class Target:
    """One command-line target, resolved to files."""

    spec: str
    """As the user wrote it."""
    files: tuple[Path, ...]
    """The Python files it stands for."""
    selector: str | None = None
    """The ``::NAME`` part."""
    explicit: bool = True
    """True for a file or module named directly (imported whatever it contains)."""
    walks: tuple[walking.Walk, ...] = ()
    """For a directory or package: what each walk read, brought in, left out and could not read."""


def walk_python_files(directory: Path) -> list[Path]:
    """The regular ``*.py`` files below ``directory``, sorted, skipping hidden and venv-like folders."""
    return walking.python_files(directory)[0]


def find_definition(root: Path, name: str) -> Path | None:
    """A Python file below ``root`` whose text defines ``name`` (``func``, ``Class`` or ``Class.method``).

    Read as text, never imported: this only tells a config name that belongs
    to a module outside this run's targets from a misspelt one.
    """
    owner, _, member = name.rpartition(".")
    patterns = [re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(member)}\b|^\s*class\s+{re.escape(member)}\b", re.M)]
    if owner:
        patterns.append(re.compile(rf"^class\s+{re.escape(owner)}\b", re.M))
    for path in walk_python_files(root):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if all(pattern.search(text) for pattern in patterns):
            return path
    return None


def resolve_target(spec: str, exclusions: tuple[walking.Exclusion, ...] = ()) -> Target:
    """Turn one command-line target into files, or raise :class:`TargetError`.

    A directory, or the dotted name of a package, is walked
    (:mod:`gradcheck.walk`): only the files that can hold something to
    check are brought in, and ``exclusions`` leave files and folders out.
    """
    location, selector = split_id(spec)
    if not location:
        raise TargetError(f"{spec}: empty target; give a .py file, a directory or a module name")
    path = Path(location)
    if path.is_dir():
        found = walking.walk(path, exclusions)
        if not (found.scanned or found.unreadable or found.not_regular or found.excluded):
            raise TargetError(f"{location}: directory holds no Python files")
        return Target(spec=spec, files=found.files, selector=selector, explicit=False, walks=(found,))
    if path.is_file():
        if path.suffix != ".py":
            raise TargetError(f"{location}: not a Python file (expected a .py file, a directory or a module name)")
        return Target(spec=spec, files=(path,), selector=selector)
    if path.exists():
        raise TargetError(f"{location}: not a regular file (expected a .py file, a directory or a module name)")
    if location.endswith(".py") or "/" in location or os.sep in location:
        raise TargetError(f"{location}: no such file or directory")
    if _DOTTED.match(location):
        return _dotted_target(spec, location, selector, exclusions)
    raise TargetError(f"{location}: no such file, directory or module")


def _dotted_target(spec: str, dotted: str, selector: str | None, exclusions: tuple[walking.Exclusion, ...]) -> Target:
    """A module name: its file; a package name: a walk of the package's folders, as ``pytest --pyargs``."""
    module_spec = _find_module_spec(dotted)
    locations = list(module_spec.submodule_search_locations or [])
    if not locations:
        if module_spec.origin is None or not module_spec.origin.endswith(".py"):
            raise TargetError(f"{dotted}: no such file, directory or module importable from {Path.cwd()}")
        return Target(spec=spec, files=(Path(module_spec.origin),), selector=selector)
    depth = dotted.count(".") + 1
    walks = []
    for location in locations:
        folder = Path(location)
        base = folder.resolve().parents[depth - 1]
        walks.append(walking.walk(folder, exclusions, package_base=base, names_root=base))
    files = tuple(dict.fromkeys(file for found in walks for file in found.files))
    return Target(spec=spec, files=files, selector=selector, explicit=False, walks=tuple(walks))


def _find_module_spec(dotted: str) -> Any:
    """The spec of a dotted name, a file or package of the current folder first, as ``python -m`` finds it.

    A local ``random.py`` means that file, not the standard library's ``random``.
    """
    top = dotted.split(".", 1)[0]
    cwd = Path.cwd()
    local = (cwd / f"{top}.py").is_file() or (cwd / top).is_dir()
    with import_context(cwd):
        try:
            if local and "." not in dotted:
                spec = importlib.machinery.PathFinder.find_spec(dotted, [str(cwd)])
            elif local and top in sys.modules:
                raise TargetError(
                    f"{dotted}: the current folder's {top} shadows the module {top} that is already imported; "
                    f"name the file or folder instead ({top}/...)"
                )
            else:
                spec = importlib.util.find_spec(dotted)
        except TargetError:
            raise
        except (ImportError, ValueError) as error:
            raise TargetError(f"{dotted}: not a path, and not a module importable from {cwd}: {error}") from error
        except Exception as error:  # a package's __init__ raised while the name was looked up
            raise TargetError(
                f"{dotted}: looking the module up ran its package, which raised {type(error).__name__}: {error}"
            ) from error
    if spec is None:
        raise TargetError(f"{dotted}: no such file, directory or module importable from {cwd}")
    return spec
