"""Which files a directory or package walk brings in, decided from their source text alone.

A walk never imports a file to find out whether it holds something to
check: importing a repository's test files, docs tools and scripts runs
their module-level code and needs their dependencies, which is how a
walk used to stop at the first file that could not import. As pytest
decides what to collect before importing (``norecursedirs``,
``--ignore-glob``), this module reads each file's text and brings in:

- a file whose code (not its comments or strings) names a custom-gradient
  marker (:data:`MARKERS`);
- a file that statically imports such a file of the same walk (absolute,
  ``from`` and relative imports, resolved to the walk's own files; a package's
  ``__init__.py`` that imports one counts as holding it) and that defines,
  at its top level, a class, a public function or a value built by a call:
  a Keras layer or a public function may reach the imported custom gradient.
  Test modules (pytest's ``test_*.py``, ``*_test.py``, ``conftest.py``) are
  brought in by their own markers only: their functions are tests, never
  targets, and their imports are the project's test dependencies.

Files that are not regular files (FIFOs, sockets, devices) are never opened;
a file that cannot be read is reported, never skipped in silence. Standard
library only: the command line decides a walk before TensorFlow is imported.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import os
import stat
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Names whose use in a file's code means the file may define or apply a custom gradient.
MARKERS = ("custom_gradient", "RegisterGradient", "gradient_override_map", "recompute_grad")

#: Folders never entered, as pytest's ``norecursedirs``.
SKIPPED_DIRS = frozenset({"__pycache__", "build", "dist", "node_modules", "venv", "env", "site-packages", "CVS"})

#: Files larger than this are not read for markers: generated data, not code a person wrote.
MAX_SOURCE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Exclusion:
    """One ``--exclude`` or config ``exclude`` glob, with the folder it is relative to."""

    pattern: str
    """As the user wrote it (``tests/*``, ``*_test.py``, ``docs``)."""
    base: Path
    """The folder it is relative to: the config file's for the config key, the current one for the flag."""
    origin: str = "--exclude"
    """Where it was written, for messages: ``--exclude`` or the config file's path."""

    def matches(self, path: Path, is_dir: bool = False, package_base: Path | None = None) -> bool:
        """True when this glob leaves ``path`` out: matched against its path below ``base``.

        A path outside ``base`` (an installed package's) is matched below
        ``package_base``, the folder its top package sits in, so that
        ``larq/snapshots/*`` means the same in a checkout and in site-packages.
        """
        pattern = self.pattern.rstrip("/")
        path = Path(os.path.abspath(path))
        if os.path.isabs(pattern):
            return _glob_match(path.as_posix(), pattern, is_dir)
        for base in (self.base, package_base):
            if base is None:
                continue
            try:
                relative = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if _glob_match(relative, pattern, is_dir):
                return True
        return False


def _glob_match(relative: str, pattern: str, is_dir: bool) -> bool:
    # fnmatch's `*` also crosses `/`, so `tests/*` covers every depth below tests/ and
    # `*_test.py` matches in any folder; `**/` adds nothing beyond that but may be written.
    candidates = [pattern, pattern[3:]] if pattern.startswith("**/") else [pattern]
    texts = [relative, relative + "/"] if is_dir else [relative]
    return any(fnmatch.fnmatchcase(text, candidate) for candidate in candidates for text in texts)


@dataclass(frozen=True)
class Unreadable:
    """A ``.py`` file of a walk that could not be read."""

    path: Path
    reason: str
    """The operating system's words (``Permission denied``)."""


@dataclass(frozen=True)
class Walk:
    """What a walk of one folder found, decided from the files' text."""

    root: Path
    """The folder walked."""
    names_root: Path
    """The folder dotted names start from: files are imported by their names below it."""
    files: tuple[Path, ...] = ()
    """The files brought in, to be imported, in path order."""
    scanned: tuple[Path, ...] = ()
    """Every regular ``.py`` file read."""
    excluded: tuple[Path, ...] = ()
    """Files and folders left out by an exclusion (a folder is not entered)."""
    unreadable: tuple[Unreadable, ...] = ()
    """``.py`` files that could not be read: each is reported."""
    not_regular: tuple[Path, ...] = ()
    """``*.py`` names that are not regular files (FIFOs, sockets, devices): never opened."""


@dataclass
class _Source:
    path: Path
    text: str
    marked: bool
    test_module: bool


def is_below(path: str, folder: str) -> bool:
    """True when the path ``path`` is ``folder`` or lies inside it (not merely shares its prefix)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _is_venv(directory: Path) -> bool:
    return (directory / "pyvenv.cfg").is_file()


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as scan:
            return sorted(scan, key=lambda entry: entry.name)
    except OSError:
        return []


def python_files(
    directory: Path, exclusions: Iterable[Exclusion] = (), package_base: Path | None = None
) -> tuple[list[Path], list[Path], list[Path]]:
    """The ``*.py`` names below ``directory``: (files, not regular files, excluded paths), sorted.

    Hidden folders, venv-like folders and :data:`SKIPPED_DIRS` are not
    entered, nor are symbolic links to folders (a link loop would never end).
    Nothing here opens a file.
    """
    exclusions = tuple(exclusions)
    files: list[Path] = []
    not_regular: list[Path] = []
    excluded: list[Path] = []
    pending = [directory]
    while pending:
        folder = pending.pop()
        subfolders = []
        for entry in _entries(folder):
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if name.startswith(".") or name in SKIPPED_DIRS or name.endswith(".egg-info"):
                    continue
                path = folder / name
                if _is_venv(path):
                    continue
                if any(e.matches(path, True, package_base) for e in exclusions):
                    excluded.append(path)
                    continue
                subfolders.append(path)
                continue
            if not name.endswith(".py"):
                continue
            path = folder / name
            if any(e.matches(path, False, package_base) for e in exclusions):
                excluded.append(path)
                continue
            try:
                mode = entry.stat().st_mode  # follows a link to a file, as an import would
            except OSError:
                files.append(path)  # a dangling link or a loop: reading it says what is wrong
                continue
            if stat.S_ISREG(mode):
                files.append(path)
            elif not stat.S_ISDIR(mode):
                not_regular.append(path)
        pending.extend(reversed(subfolders))
    return sorted(files), sorted(not_regular), sorted(excluded)


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read(path: Path) -> str:
    """The file's text; raises OSError. Opened without blocking, so a file swapped for a FIFO cannot hang it.

    Decoded as UTF-8 with replacements: the markers and import statements
    are ASCII, which every encoding Python accepts for source keeps as is.
    """
    descriptor = os.open(path, _OPEN_FLAGS)
    try:
        size = os.fstat(descriptor)
        if not stat.S_ISREG(size.st_mode):
            raise OSError(f"{path}: not a regular file")
        if size.st_size > MAX_SOURCE_BYTES:
            return ""
        chunks = []
        while chunk := os.read(descriptor, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _only_in_comments(text: str) -> bool:
    """True when every line that names a marker is a comment line: the common case, decided without tokenizing."""
    for line in text.splitlines():
        if any(marker in line for marker in MARKERS) and not line.lstrip().startswith("#"):
            return False
    return True


def names_a_marker(text: str) -> bool:
    """True when the code (not a comment or a string) uses one of :data:`MARKERS`."""
    if not any(marker in text for marker in MARKERS) or _only_in_comments(text):
        return False
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.NAME and token.string in MARKERS:
                return True
    except (tokenize.TokenError, SyntaxError):
        # Code that does not tokenize cannot be judged here: importing it says what is wrong.
        return True
    return False


def is_test_module(path: Path) -> bool:
    """pytest's default test-module names, and ``conftest.py``."""
    name = path.name
    return name == "conftest.py" or (name.startswith("test_") or name.endswith("_test.py"))


def module_names(path: Path, root: Path) -> list[str]:
    """The dotted names ``path`` can be imported by from folders between ``root`` and it.

    ``root/pkg/ops.py`` gives ``pkg.ops`` and ``ops``; a package's
    ``__init__.py`` gives the package's names. Namespace folders (no
    ``__init__.py``) count, as PEP 420 has them.
    """
    try:
        parts = list(Path(os.path.abspath(path)).relative_to(root).with_suffix("").parts)
    except ValueError:
        return []
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return [".".join(parts[index:]) for index in range(len(parts)) if parts[index:]]


def import_statements(tree: ast.Module) -> list[tuple[int, str]]:
    """Every module name an import statement of ``tree`` may load, with its relative level (0: absolute).

    ``from pkg import sub`` gives ``pkg`` and ``pkg.sub`` (``sub`` may be a submodule);
    ``from . import x`` gives ``(1, "")``, the package itself, and ``(1, "x")``. The one
    reading of imports that walks and ``--changed-since`` share.
    """
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module or node.level:
                names.append((node.level, module))
            names += [
                (node.level, f"{module}.{alias.name}" if module else alias.name)
                for alias in node.names
                if alias.name != "*"
            ]
    return names


def _imports(tree: ast.Module, path: Path, root: Path) -> list[str]:
    """The absolute dotted names a module imports, relative imports resolved against its own place."""
    here = module_names(path, root)
    package = here[0].split(".") if here else []
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[str] = []
    for level, dotted in import_statements(tree):
        if not level:
            found.append(dotted)
        elif level - 1 <= len(package):
            found.append(".".join([*package[: len(package) - (level - 1)], *([dotted] if dotted else [])]))
    return found


def _defines_reachable(tree: ast.Module) -> bool:
    """A top-level class, public function, or value built by a call (what may reach a custom gradient)."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            return True
    return False


def import_base(directory: Path) -> Path:
    """The folder above the packages ``directory`` is in (itself where it is no package): where dotted names start."""
    folder = Path(os.path.abspath(directory))
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


def walk(
    directory: Path,
    exclusions: Iterable[Exclusion] = (),
    package_base: Path | None = None,
    names_root: Path | None = None,
) -> Walk:
    """Walk ``directory`` and decide which of its files to import (see the module's docstring).

    ``package_base`` is the folder an installed package sits in (exclusions
    match below it too). Dotted names start at ``names_root``, by default
    the :func:`import_base` of ``directory``.
    """
    root = names_root if names_root is not None else import_base(directory)
    candidates, not_regular, excluded = python_files(directory, exclusions, package_base)
    sources: list[_Source] = []
    unreadable: list[Unreadable] = []
    for path in candidates:
        try:
            text = _read(path)
        except OSError as error:
            unreadable.append(Unreadable(path, error.strerror or str(error)))
            continue
        sources.append(_Source(path, text, names_a_marker(text), is_test_module(path)))
    brought = _brought_in(sources, root)
    return Walk(
        root=directory,
        names_root=root,
        files=tuple(sorted(brought)),
        scanned=tuple(source.path for source in sources),
        excluded=tuple(excluded),
        unreadable=tuple(unreadable),
        not_regular=tuple(not_regular),
    )


def _brought_in(sources: list[_Source], root: Path) -> set[Path]:
    """The marked files, and the files that import one and define something that may reach it."""
    marked = [source for source in sources if source.marked]
    if not marked:
        return set()
    holding = {name for source in marked for name in module_names(source.path, root)}
    # A package whose __init__.py imports a marked module hands it on to `import pkg` and `from pkg import x`.
    parsed: dict[Path, ast.Module | None] = {}
    for source in sources:
        if source.path.name == "__init__.py" and not source.marked and _names_any(source.text, holding):
            tree = parsed[source.path] = _parse(source)
            if tree is not None and any(name in holding for name in _imports(tree, source.path, root)):
                holding.update(module_names(source.path, root))
    brought = {source.path for source in marked}
    for source in sources:
        # Cheap first: a file that names none of the holding modules cannot import one.
        if source.marked or source.test_module or not _names_any(source.text, holding):
            continue
        tree = parsed[source.path] if source.path in parsed else _parse(source)
        if tree is None or not _defines_reachable(tree):
            continue
        if any(name in holding for name in _imports(tree, source.path, root)):
            brought.add(source.path)
    return brought


def _names_any(text: str, modules: set[str]) -> bool:
    """True when ``text`` names the last part of one of ``modules`` (``ops`` of ``pkg.ops``) or imports relatively."""
    return "from ." in text or any(name.rsplit(".", 1)[-1] in text for name in modules)


def _parse(source: _Source) -> ast.Module | None:
    try:
        return ast.parse(source.text, filename=str(source.path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
