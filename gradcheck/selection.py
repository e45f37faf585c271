"""Which functions a run checks: ``--shard K/N`` and ``--changed-since REF``.

Pure functions (git aside), with no TensorFlow: the command line parses and
asks git here; :func:`gradcheck.collection.collect` filters with the results.

- A shard is chosen by a CRC-32 of the function id (``path::name`` as
  reports show it), never Python's salted ``hash``: a function keeps its
  shard across runs, machines and when other functions are added.
- A changed module is one ``git diff --name-only REF`` names (commits since
  REF, staged and unstaged changes) or one git does not track yet (a new
  file, unless ignored). A function is checked when its module or a module
  it imports from the project, directly or not, changed. Imports are read
  with :mod:`ast`, not run; an import the parser cannot resolve to a file in
  the repository (the standard library, installed packages) is not followed.
"""

from __future__ import annotations

import ast
import subprocess
import zlib
from collections.abc import Iterable
from pathlib import Path

from gradcheck.errors import UsageError
from gradcheck.walk import import_statements


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` as ``(K, N)`` with ``1 <= K <= N``; anything else is a UsageError."""
    index, slash, count = text.strip().partition("/")
    if slash and index.isdigit() and count.isdigit():
        k, n = int(index), int(count)
        if 1 <= k <= n:
            return k, n
    raise UsageError(f"--shard {text}: write K/N with 1 <= K <= N, e.g. --shard 1/4")


def shard_of(function_id: str, count: int) -> int:
    """The shard (1..count) a function id belongs to; stable across runs and machines."""
    return zlib.crc32(function_id.encode("utf-8")) % count + 1


def in_shard(function_id: str, shard: tuple[int, int]) -> bool:
    """Whether ``function_id`` is in shard ``(K, N)``."""
    index, count = shard
    return shard_of(function_id, count) == index


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UsageError("--changed-since: git is not installed") from None


def changed_files(ref: str, cwd: Path | None = None) -> frozenset[Path]:
    """The files changed since git ref ``ref`` (resolved paths): committed, staged, unstaged and untracked.

    Outside a git repository, or with a ref git does not know, a UsageError.
    """
    where = Path(cwd or Path.cwd())
    top = _git(["rev-parse", "--show-toplevel"], where)
    if top.returncode != 0:
        raise UsageError(f"--changed-since {ref}: {where} is not in a git repository")
    root = Path(top.stdout.strip())
    if ref.startswith("-") or _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], root).returncode != 0:
        raise UsageError(f"--changed-since {ref}: git knows no commit {ref!r} (try a branch, tag or sha)")
    diff = _git(["diff", "--name-only", "-z", ref, "--"], root)
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], root)
    if diff.returncode != 0:
        raise UsageError(f"--changed-since {ref}: git diff failed: {' '.join(diff.stderr.split())}")
    names = [n for n in (diff.stdout + untracked.stdout).split("\0") if n]
    return frozenset((root / name).resolve() for name in names)


def _module_files(base: Path, dotted: str) -> list[Path]:
    """The files that importing ``dotted`` from ``base`` runs: each package's ``__init__`` and the module."""
    parts = [p for p in dotted.split(".") if p]
    found = []
    for depth in range(1, len(parts) + 1):
        stem = base.joinpath(*parts[:depth])
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate.is_file():
                found.append(candidate.resolve())
    return found


def project_imports(file: Path, root: Path) -> set[Path]:
    """The files under ``root`` that ``file`` imports directly, read with :mod:`ast`.

    Absolute imports are looked for from the file's folder and each folder
    above it up to ``root`` (script folders, packages and ``src`` layouts
    alike); relative ones from the file's package. Guessing one folder too
    many only checks more, never less.
    """
    file, root = file.resolve(), root.resolve()
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return set()
    bases = [folder for folder in [file.parent, *file.parent.parents] if folder == root or root in folder.parents]
    found: set[Path] = set()
    for level, dotted in import_statements(tree):
        if level:
            package = file.parent
            for _ in range(level - 1):
                package = package.parent
            found.update(_module_files(package, dotted))
        else:
            for base in bases:
                found.update(_module_files(base, dotted))
    found.discard(file)
    return {path for path in found if root in path.parents}


def affected(files: Iterable[Path], changed: frozenset[Path], root: Path) -> set[Path]:
    """Those of ``files`` (resolved) that changed or import, directly or not, a changed project module."""
    imports: dict[Path, set[Path]] = {}
    chosen = set()
    for start in {path.resolve() for path in files}:
        seen, pending = {start}, [start]
        while pending:
            path = pending.pop()
            if path in changed:
                chosen.add(start)
                break
            if path not in imports:
                imports[path] = project_imports(path, root)
            fresh = imports[path] - seen
            seen |= fresh
            pending += fresh
    return chosen


def git_root(cwd: Path | None = None) -> Path:
    """The top folder of the git repository around ``cwd``."""
    top = _git(["rev-parse", "--show-toplevel"], Path(cwd or Path.cwd()))
    if top.returncode != 0:
        raise UsageError("--changed-since: not in a git repository")
    return Path(top.stdout.strip()).resolve()
