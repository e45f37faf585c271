"""Importing a user's module, and the objects a config's ``{ import = ... }`` values name.

Modules are imported with their folder on ``sys.path`` and are taken out
of ``sys.modules`` and ``sys.path`` again afterwards, as pytest's importer
does, so importing a module leaves the interpreter as it found it. A module
that cannot be imported is an :class:`ImportFailure`: where, why and what
to do, in one line.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from gradcheck import _tf, tracebacks
from gradcheck import walk as walking
from gradcheck.config import ImportValue, closest
from gradcheck.errors import ConfigError, TargetError, UsageError
from gradcheck.paths import display_path, installed_dirs


def import_root(path: Path, base: Path | None = None) -> Path:
    """The folder put on ``sys.path`` to import ``path`` (above its packages)."""
    return _package_root(path, base)[0]


def _package_root(path: Path, base: Path | None = None) -> tuple[Path, str]:
    """The folder to put on ``sys.path`` and the dotted name to import ``path`` by.

    Climbs while folders are packages (hold ``__init__.py``). Below ``base``
    (the walk's own root), a folder without ``__init__.py`` that has a
    package above it is a namespace package (PEP 420), and the climb goes on
    through it: ``pkg/ns/sub/mod.py`` is ``pkg.ns.sub.mod``, as the package's
    own imports name it.
    """
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    limit = base.resolve() if base is not None else None
    while True:
        while (folder / "__init__.py").is_file() and folder.parent != folder:
            parts.insert(0, folder.name)
            folder = folder.parent
        if limit is None or folder == limit or limit not in folder.parents:
            return folder, ".".join(parts)
        above = next(
            (up for up in folder.parents if (up / "__init__.py").is_file() and (up == limit or limit in up.parents)),
            None,
        )
        if above is None:
            return folder, ".".join(parts)
        while folder != above:
            parts.insert(0, folder.name)
            folder = folder.parent


@contextlib.contextmanager
def import_context(root: Path) -> Iterator[set[str]]:
    """Put ``root`` on ``sys.path`` and take the user's modules out again afterwards.

    Yields the set of module names that were imported, filled on exit.
    Modules below ``root`` that were not loaded before are removed from
    ``sys.modules``; libraries the user's module pulled in (TensorFlow and
    friends, in site-packages) stay, since importing them twice is costly
    and unsafe.
    """
    saved_path = list(sys.path)
    before = set(sys.modules)
    added: set[str] = set()
    root_text = str(root.resolve())
    sys.path.insert(0, root_text)
    importlib.invalidate_caches()
    try:
        yield added
    finally:
        sys.path[:] = saved_path
        site_dirs = installed_dirs()
        # Where each new module lives is read before any is removed: a namespace package's
        # __path__ recomputes itself from its parent's sys.modules entry (KeyError once gone).
        # Children go first, so no module is left without its parent package, whatever the hash seed.
        for name in sorted(set(sys.modules) - before, key=lambda n: (-n.count("."), n)):
            file = _module_location(sys.modules.get(name))
            if file is not None and walking.is_below(file, root_text) and not file.startswith(site_dirs):
                added.add(name)
        for name in sorted(added, key=lambda n: (-n.count("."), n)):
            sys.modules.pop(name, None)


def _module_location(module: Any) -> str | None:
    """The resolved file (or first package folder) of a module, or None; never raises."""
    try:
        file = getattr(module, "__file__", None)
        if file is None:
            spec = getattr(module, "__spec__", None)
            locations = getattr(spec, "submodule_search_locations", None)
            file = next(iter(list(locations)), None) if locations is not None else None
        return str(Path(file).resolve()) if isinstance(file, str) else None
    except Exception:  # a user's module can make any attribute read raise
        return None


@contextlib.contextmanager
def _no_bytecode_files() -> Iterator[None]:
    """Import without writing ``__pycache__`` into the user's folders.

    Checking a project leaves its files and folders as they were; and a file
    rewritten within the same second at the same size would otherwise be
    imported from its stale bytecode.
    """
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved


def _user_frame(error: BaseException, path: Path) -> tuple[str, int | None]:
    """``file:line`` of the deepest frame in the user's file, for messages, and that line."""
    frame = tracebacks.user_frame(error, path, follow_causes=False)
    if frame is None or frame.lineno is None:
        return display_path(path), None
    return f"{display_path(path)}:{frame.lineno}", frame.lineno


def _text_of(error: BaseException) -> str:
    """What the error says, or that it says nothing readable (user code may define any ``__str__``)."""
    return tracebacks.message_of(error) or "(its message could not be read)"


class ImportFailure(TargetError):
    """A user's module that could not be imported: where, why, and what to do.

    On the command line it is one line (exit 2); for a file a walk brought
    in it becomes that module's ``error`` result instead.
    """

    def __init__(
        self, path: Path, where: tuple[str, int | None], reason: str, hint: str, missing: str | None = None
    ) -> None:
        super().__init__(f"{where[0]}: {reason}; {hint}")
        self.path = path
        """The file that was imported."""
        self.where, self.line = where
        """``file:line`` where the import failed, and the line in ``path``."""
        self.reason = reason
        """What failed (``import failed: No module named 'x'``)."""
        self.hint = hint
        """What to do."""
        self.missing = missing
        """The missing module's name, for an ``ImportError``."""


def load_module(path: Path, base: Path | None = None) -> ModuleType:
    """Import the user's file; raise :class:`ImportFailure` (one line) when it fails.

    ``base`` is the root of the walk that found the file: below it,
    namespace folders are part of the dotted name (:func:`_package_root`).
    """
    root, dotted = _package_root(path, base)
    existing = sys.modules.get(dotted)
    existing_file = getattr(existing, "__file__", None)
    if existing is not None and existing_file and Path(existing_file).resolve() == path.resolve():
        return existing  # the user's own process imported it already (pytest plugin)
    with import_context(root), contextlib.redirect_stdout(sys.stderr), _no_bytecode_files():
        try:
            if "." in dotted or not _clashes(dotted):
                return importlib.import_module(dotted)
            return _import_under_private_name(path, dotted)
        except SyntaxError as error:
            failing = Path(error.filename) if error.filename else path
            where = display_path(failing) + (f":{error.lineno}:{error.offset}" if error.lineno else "")
            line = error.lineno if failing.resolve() == path.resolve() else None
            raise ImportFailure(path, (where, line), f"syntax error: {error.msg}", "fix the syntax") from error
        except ImportError as error:
            if isinstance(error, _tf.TensorFlowMissing):
                raise
            missing = error.name if isinstance(error, ModuleNotFoundError) else None
            what = f"install the missing module {missing}" if missing else "install the missing module"
            raise ImportFailure(
                path,
                _user_frame(error, path),
                f"import failed: {_text_of(error)}",
                f"{what} or fix the import",
                missing,
            ) from error
        except BaseException as error:  # the user's module-level code raised anything at all
            if tracebacks.is_ctrl_c(error):
                raise
            raise ImportFailure(
                path,
                _user_frame(error, path),
                f"importing the module raised {type(error).__name__}: {_text_of(error)}",
                "fix the module-level code",
            ) from error


def import_object(value: ImportValue, target: Path | None) -> Any:
    """The object a ``{ import = "module:attribute" }`` config value names, imported as a target is.

    A ``.py`` path is read from the config file's folder; a dotted name is
    looked up with that folder and the import root of ``target`` (the
    checked module's file) on ``sys.path``. A module of the user's is
    imported by :func:`load_module`, so ``sys.modules`` and ``sys.path`` are
    as before afterwards (the object keeps its module's globals alive).
    Anything that fails is a :class:`ConfigError` naming the config file and key.
    """
    base = (value.folder or Path.cwd()).resolve()
    where = f"{value.source}: {value.key}: {value.spec}"
    try:
        module = _imported_for_config(value.module, base, target)
    except UsageError as error:  # the module's own failure, as load_module words it
        raise ConfigError(f"{where}: {error}") from error
    found: Any = module
    parts = value.attribute.split(".")
    for depth, part in enumerate(parts):
        try:
            found = getattr(found, part)
        except Exception as error:  # AttributeError, or whatever a lazy attribute raises
            # Named as written: the module may be imported under a private name (a file called random.py).
            owner = value.module if depth == 0 else f"{value.module}:{'.'.join(parts[:depth])}"
            names = [name for name in dir(found) if not name.startswith("_")]
            missing = f"has no attribute '{part}'{closest(part, names)}"
            if not isinstance(error, AttributeError):
                missing = f"raised {type(error).__name__} reading '{part}': {_one_line(error)}"
            raise ConfigError(f"{where}: {owner} {missing}; name an attribute it defines") from error
    return found


def _imported_for_config(module: str, base: Path, target: Path | None) -> ModuleType:
    """The module of an ``import`` config value: a ``.py`` path below ``base``, or a dotted name."""
    if module.endswith(".py"):
        path = Path(module) if Path(module).is_absolute() else base / module
        if not path.is_file():
            raise TargetError(f"{display_path(path)}: no such file (a path is read from {base})")
        return load_module(path)
    folders = list(dict.fromkeys([base, *([import_root(target)] if target is not None else [])]))
    with contextlib.ExitStack() as stack:
        for folder in reversed(folders):  # the config's folder ends up first on sys.path
            stack.enter_context(import_context(folder))
        try:
            spec = importlib.util.find_spec(module)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a parent package's __init__ raised, whatever it raised
            raise TargetError(f"cannot import {module}: {type(error).__name__}: {_one_line(error)}") from error
    if spec is None:
        searched = " or ".join(str(folder) for folder in folders)
        raise TargetError(
            f"no module named '{module}' importable from {searched}; "
            "put it there, or give the path of its .py file relative to the config file"
        )
    if spec.origin is not None and spec.origin.endswith(".py"):
        return load_module(Path(spec.origin))
    try:  # built in, or compiled: a library, nothing of the user's to isolate
        return importlib.import_module(module)
    except Exception as error:
        raise TargetError(f"cannot import {module}: {type(error).__name__}: {_one_line(error)}") from error


def _one_line(error: BaseException) -> str:
    return " ".join(_text_of(error).split())


def _clashes(name: str) -> bool:
    return name in sys.modules or name in sys.stdlib_module_names


def _import_under_private_name(path: Path, stem: str) -> ModuleType:
    """Import a file whose name shadows a loaded or standard module (``random.py``)."""
    name = f"gradcheck_target_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - .py files always have one
        raise TargetError(f"{display_path(path)}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module
