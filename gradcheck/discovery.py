"""Targets -> imported modules -> the custom gradients they define.

A target is a ``.py`` file, a directory of them, or a dotted module name,
with an optional ``::NAME`` selector. Modules are imported with their
folder on ``sys.path`` and are taken out of ``sys.modules`` and
``sys.path`` again afterwards, as pytest's importer does, so checking a
module leaves the interpreter as it found it. Like pytest's collector, only
objects the module itself defined are kept, in definition order.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import re
import site
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from gradcheck import _tf, nesting, tracebacks
from gradcheck import walk as walking
from gradcheck.config import ImportValue, closest
from gradcheck.errors import ConfigError, TargetError, UsageError

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


@dataclass(frozen=True)
class Subject:
    """One custom-gradient function (or layer) found in a module."""

    id: str
    """``path::name`` as shown in reports and accepted by ``::``."""
    name: str
    """Name in its module: ``func``, or ``Class.method`` for methods."""
    kind: str
    """``function`` or ``layer``."""
    path: str
    """The module's file as shown in reports."""
    line: int
    """Line of the ``def``."""
    obj: Any
    """The user's object as it appears in the module or class."""
    forward: Callable[..., Any] | None
    """The undecorated function returning ``(result, grad_fn)``."""
    decorators: tuple[str, ...] = ()
    """TF decorators from the outside in."""
    input_signature: tuple[Any, ...] | None = None
    """``tf.function`` input signature, if any."""
    owner: type | None = None
    """The class of a method."""
    binding: str = "function"
    """``function``, ``staticmethod``, ``classmethod``, ``method``, ``wrapper`` or ``layer``."""
    module: ModuleType | None = None
    """The module that defines it."""
    patches: tuple[tuple[dict[str, Any], str], ...] = ()
    """For a layer: the (namespace, name) of each custom-gradient function its ``call`` reaches."""
    reaches: tuple[str, ...] = ()
    """For a layer: the names of those functions, for listings."""
    reaching: bool = False
    """Its custom gradients are made as it runs (nested, or behind a helper): they are found,
    instrumented and switched off while it runs (:mod:`gradcheck.targets.reaching`)."""
    explicit: bool = False
    """Named by ``::NAME`` or a config table: checked even where it reaches no custom gradient."""
    aliases: tuple[str, ...] = ()
    """Other names the module gives the same object (``Alias = Layer``): checked once, under ``name``."""


def display_path(path: Path, resolve: bool = True) -> str:
    """``path`` relative to the current directory where it lies below it (links followed unless not ``resolve``)."""
    resolved = path.resolve() if resolve else Path(os.path.abspath(path))
    try:
        return resolved.relative_to(Path.cwd().resolve() if resolve else Path(os.getcwd())).as_posix()
    except ValueError:
        return resolved.as_posix()


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
    location, _, selector = spec.partition("::")
    if not location:
        raise TargetError(f"{spec}: empty target; give a .py file, a directory or a module name")
    path = Path(location)
    if path.is_dir():
        found = walking.walk(path, exclusions)
        if not (found.scanned or found.unreadable or found.not_regular or found.excluded):
            raise TargetError(f"{location}: directory holds no Python files")
        return Target(spec=spec, files=found.files, selector=selector or None, explicit=False, walks=(found,))
    if path.is_file():
        if path.suffix != ".py":
            raise TargetError(f"{location}: not a Python file (expected a .py file, a directory or a module name)")
        return Target(spec=spec, files=(path,), selector=selector or None)
    if path.exists():
        raise TargetError(f"{location}: not a regular file (expected a .py file, a directory or a module name)")
    if location.endswith(".py") or "/" in location or os.sep in location:
        raise TargetError(f"{location}: no such file or directory")
    if _DOTTED.match(location):
        return _dotted_target(spec, location, selector or None, exclusions)
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
    with _import_context(cwd):
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


def _site_dirs() -> tuple[str, ...]:
    dirs = set()
    with contextlib.suppress(AttributeError):
        dirs.update(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        dirs.add(site.getusersitepackages())
    dirs.update({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return tuple(str(Path(d).resolve()) for d in dirs if d)


@contextlib.contextmanager
def _import_context(root: Path) -> Iterator[set[str]]:
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
        site_dirs = _site_dirs()
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
    if existing_file and Path(existing_file).resolve() == path.resolve():
        return existing  # the user's own process imported it already (pytest plugin)
    with _import_context(root), contextlib.redirect_stdout(sys.stderr), _no_bytecode_files():
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
            stack.enter_context(_import_context(folder))
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


def _def_line(func: Any) -> int:
    """Line of the ``def`` itself (``co_firstlineno`` points at the first decorator)."""
    code = getattr(inspect.unwrap(func), "__code__", None)
    if code is None:
        return 0
    line = code.co_firstlineno
    with contextlib.suppress(OSError, TypeError):
        lines, start = inspect.getsourcelines(code)
        for offset, text in enumerate(lines):
            stripped = text.lstrip()
            if stripped.startswith(("def ", "async def ")):
                return start + offset
    return line


def _defined_here(forward: Any, module: ModuleType) -> bool:
    return getattr(forward, "__module__", None) == module.__name__


@dataclass(frozen=True)
class Place:
    """Where discovery found an object: its name there, its module and file, and the class holding it."""

    name: str
    """``func``, ``Class.method`` or ``Layer``."""
    path: Path
    """The module's file."""
    module: ModuleType
    owner: type | None = None
    """The class of a method."""
    binding: str = "function"
    """How a method is bound: ``staticmethod``, ``classmethod`` or ``method``."""


def subject_of(obj: Any, place: Place | None = None) -> Subject | None:
    """The checkable subject ``obj`` is, or None: the one way an object becomes a :class:`Subject`.

    A subject is a ``@tf.custom_gradient`` function (or method), a function
    wrapped by a gradient decorator such as ``tf.recompute_grad``, or a Keras
    layer whose ``call`` reaches custom gradients. With ``place`` (discovery
    walking a module), only what that module itself defines counts, and a
    layer is a class. Without it (``gradcheck.check``), the name and file
    come from the object's own definition, and a layer instance counts too.
    """
    layer_class = obj if isinstance(obj, type) else (type(obj) if place is None else None)
    if layer_class is not None and _tf.is_keras_layer_class(layer_class):
        return _layer_subject(obj, layer_class, place)
    parts = _tf.custom_gradient_parts(obj)
    wrapper = _tf.wrapper_parts(obj) if parts is None and (place is None or place.owner is None) else None
    if parts is None and wrapper is None:
        return _reaching_callable(obj) if place is None else None
    forward = parts.forward if parts is not None else wrapper[1]  # type: ignore[index]
    if place is not None and not _defined_here(forward, place.module):
        return None
    name = (
        place.name if place is not None else getattr(forward, "__qualname__", getattr(forward, "__name__", "function"))
    )
    if place is not None:
        shown = display_path(place.path)
    else:
        shown = _shown_source(forward)
    return Subject(
        id=f"{shown}::{name}",
        name=name,
        kind="function",
        path=shown,
        line=_def_line(forward),
        obj=obj,
        forward=forward,
        decorators=parts.decorators if parts is not None else (wrapper[0],),  # type: ignore[index]
        input_signature=parts.input_signature if parts is not None else None,
        owner=place.owner if place is not None else None,
        binding=(place.binding if place is not None else "function") if parts is not None else "wrapper",
        module=place.module if place is not None else inspect.getmodule(forward),
    )


def _reaching_callable(obj: Any) -> Subject | None:
    """A function or bound method handed to ``gradcheck.check`` that makes custom gradients as it runs."""
    function = nesting.plain_function(obj)
    if not inspect.isfunction(function):
        return None
    if not nesting.Reachability(function.__module__ or "").makes_custom_gradients(obj):
        return None
    shown = _shown_source(function)
    name = function.__qualname__
    return Subject(
        id=f"{shown}::{name}",
        name=name,
        kind="function",
        path=shown,
        line=_def_line(function),
        obj=obj,
        forward=obj,
        module=inspect.getmodule(function),
        reaching=True,
        explicit=True,
    )


def _shown_source(function: Any) -> str:
    """The file a function (behind its wrappers) is defined in, as reports show it."""
    source = None
    with contextlib.suppress(TypeError):
        source = inspect.getsourcefile(inspect.unwrap(function))
    return display_path(Path(source)) if source else "<unknown>"


def why_not_subject(obj: Any) -> str:
    """Why :func:`subject_of` found no subject in ``obj``, for a message."""
    layer_class = obj if isinstance(obj, type) else type(obj)
    if _tf.is_keras_layer_class(layer_class):
        return f"{layer_class.__name__}.call reaches no @tf.custom_gradient function"
    return f"{getattr(obj, '__qualname__', obj)!r} is not a @tf.custom_gradient function"


def find_subjects(module: ModuleType, path: Path, named: Iterable[str] = ()) -> list[Subject]:
    """Custom-gradient functions, methods, gradient wrappers and layers that ``module`` defines.

    Public functions and methods that make custom gradients as they run
    (:mod:`gradcheck.nesting`) are subjects too; so is each function or
    layer in ``named`` (``::NAME`` or a config table), whatever it reaches.
    """
    found: list[Subject | None] = []
    for name, obj in list(vars(module).items()):
        if not inspect.isclass(obj):
            found.append(subject_of(obj, Place(name, path, module)))
        elif obj.__module__ != module.__name__:
            continue
        elif _tf.is_keras_layer_class(obj):
            found.append(subject_of(obj, Place(name, path, module)))
        else:
            for attr, member in vars(obj).items():
                bound = isinstance(member, (staticmethod, classmethod))
                binding = ("staticmethod" if isinstance(member, staticmethod) else "classmethod") if bound else "method"
                function = member.__func__ if bound else member
                found.append(subject_of(function, Place(f"{name}.{attr}", path, module, obj, binding)))
    subjects = _one_per_object([subject for subject in found if subject is not None])
    taken = {subject.name for subject in subjects} | {alias for subject in subjects for alias in subject.aliases}
    named = set(named)
    for name, function, owner, binding in nesting.candidates(module, taken):
        subjects.append(_reaching_subject(function, Place(name, path, module, owner, binding), name in named))
        taken.add(name)
    for name in sorted(named):
        if name not in taken and (explicit := _explicit_subject(module, path, name)) is not None:
            subjects.append(explicit)
    subjects.sort(key=lambda s: s.line)
    return subjects


def _defining_object(subject: Subject) -> Any:
    """What two names of one subject share: the layer class, or the function object itself.

    Not the function behind the decorators: ``a = tf.custom_gradient(f)`` and
    ``b = tf.custom_gradient(f)`` are two custom gradients, each checked.
    """
    return subject.owner if subject.kind == "layer" else subject.obj


def _one_per_object(subjects: list[Subject]) -> list[Subject]:
    """One subject per object: an alias (``Alias = Layer``) is a name of the same subject, not another one.

    The subject keeps the name that defines the object (its ``__name__``),
    else the first; the other names are its ``aliases``.
    """
    groups: dict[tuple[int, str | None], list[Subject]] = {}
    for subject in subjects:
        owner = subject.owner if subject.kind != "layer" else None
        key = (id(_defining_object(subject)), f"{id(owner)}:{subject.binding}" if owner is not None else None)
        groups.setdefault(key, []).append(subject)
    kept = []
    for group in groups.values():
        defining = next((s for s in group if s.name.rsplit(".", 1)[-1] == _own_name(s)), group[0])
        others = tuple(s.name for s in group if s is not defining)
        kept.append(replace(defining, aliases=defining.aliases + others) if others else defining)
    return kept


def _own_name(subject: Subject) -> str | None:
    """The name the ``def`` or ``class`` statement gave the object (a function's ``__name__`` can be reassigned)."""
    obj = subject.forward if subject.kind != "layer" and subject.forward is not None else _defining_object(subject)
    try:
        code = getattr(inspect.unwrap(obj), "__code__", None)
        return code.co_name if code is not None else getattr(obj, "__name__", None)
    except Exception:
        return None


def _reaching_subject(function: Any, place: Place, explicit: bool = False) -> Subject:
    """A function or method checked through the custom gradients it makes as it runs."""
    forward = nesting.plain_function(function)
    shown = display_path(place.path)
    return Subject(
        id=f"{shown}::{place.name}",
        name=place.name,
        kind="function",
        path=shown,
        line=_def_line(forward),
        obj=function,
        forward=forward,
        owner=place.owner,
        binding=place.binding,
        module=place.module,
        reaching=True,
        explicit=explicit,
    )


def _explicit_subject(module: ModuleType, path: Path, name: str) -> Subject | None:
    """A function, method or Keras layer ``module`` defines, named by the user: checked anyway."""
    owner_name, _, member = name.rpartition(".")
    owner = vars(module).get(owner_name) if owner_name else None
    obj = vars(owner).get(member) if isinstance(owner, type) else vars(module).get(name)
    if owner_name and not isinstance(owner, type):
        return None
    if owner is None and _tf.is_keras_layer_class(obj) and obj.__module__ == module.__name__:
        call = getattr(obj, "call", None)
        return _reaching_layer(obj, obj, Place(name, path, module), call, explicit=True) if call is not None else None
    function = nesting.plain_function(obj)
    if not inspect.isfunction(function) or function.__module__ != module.__name__:
        return None
    binding = "method"
    if isinstance(obj, staticmethod):
        binding = "staticmethod"
    elif isinstance(obj, classmethod):
        binding = "classmethod"
    elif owner is None:
        binding = "function"
    return _reaching_subject(obj, Place(name, path, module, owner, binding), explicit=True)


def _layer_subject(obj: Any, cls: type, place: Place | None) -> Subject | None:
    """A Keras layer (class, or instance without ``place``) whose ``call`` reaches custom-gradient functions."""
    call = vars(cls).get("call") or getattr(cls, "call", None)
    if call is None or not hasattr(call, "__code__"):
        return None
    patches = reached_custom_gradients(call, cls)
    if not patches:
        home = cls.__module__ if place is None else place.module
        if nesting.Reachability(home).makes_custom_gradients(call, cls):
            return _reaching_layer(obj, cls, place, call)
        return None
    return _placed_layer(
        obj, cls, place, call, patches=tuple(patches), reaches=tuple(dict.fromkeys(n for _, n in patches))
    )


def _reaching_layer(obj: Any, cls: type, place: Place | None, call: Any, explicit: bool = False) -> Subject:
    """A layer whose ``call`` makes custom gradients as it runs (a custom-gradient method, or one
    nested in ``call``), or a layer named explicitly."""
    return _placed_layer(obj, cls, place, call, reaching=True, explicit=explicit)


def _placed_layer(obj: Any, cls: type, place: Place | None, call: Any, **how: Any) -> Subject:
    """The subject of a layer, named where discovery found it (else by its class and ``call``'s file)."""
    if place is not None:
        name, shown, line, module = place.name, display_path(place.path), _class_line(cls, place.path), place.module
    else:
        source = call.__code__.co_filename
        name, shown, line, module = cls.__name__, display_path(Path(source)), 0, sys.modules.get(cls.__module__)
    return Subject(
        id=f"{shown}::{name}",
        name=name,
        kind="layer",
        path=shown,
        line=line,
        obj=obj,
        forward=None,
        owner=cls,
        binding="layer",
        module=module,
        **how,
    )


def _code_names(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def reached_custom_gradients(function: Any, cls: type | None = None) -> list[tuple[dict[str, Any], str]]:
    """The (namespace, name) of every custom-gradient function ``function`` can call.

    Follows the names its code uses: module globals that are custom-gradient
    functions, attributes of imported user modules (``ops.custom_op``), plain
    helper functions of the same module, and other methods of ``cls``.
    """
    found: list[tuple[dict[str, Any], str]] = []
    seen: set[int] = set()

    def visit(func: Any) -> None:
        func = inspect.unwrap(func)
        code = getattr(func, "__code__", None)
        if code is None or id(code) in seen:
            return
        seen.add(id(code))
        namespace = getattr(func, "__globals__", {})
        names = _code_names(code)
        for name in sorted(names):
            if name in namespace:
                value = namespace[name]
                if _tf.custom_gradient_parts(value) is not None:
                    found.append((namespace, name))
                elif (
                    isinstance(value, ModuleType)
                    and not _tf.is_tf_own(value)
                    and value.__name__ not in sys.stdlib_module_names
                ):
                    for attr in sorted(names):
                        member = vars(value).get(attr)
                        if member is not None and _tf.custom_gradient_parts(member) is not None:
                            found.append((vars(value), attr))
                elif inspect.isfunction(value) and not _tf.is_tf_own(value):
                    visit(value)
            if cls is not None:
                member = _class_attribute(cls, name)
                if member is not None:
                    visit(member)

    visit(function)
    unique: dict[tuple[int, str], tuple[dict[str, Any], str]] = {}
    for namespace, name in found:
        unique.setdefault((id(namespace), name), (namespace, name))
    return list(unique.values())


def _class_attribute(cls: type, name: str) -> Any:
    """A method of ``cls`` or one of its user-defined bases (not Keras's own)."""
    for klass in cls.__mro__:
        if _tf.is_tf_own(klass) or klass is object:
            continue
        member = vars(klass).get(name)
        if isinstance(member, (staticmethod, classmethod)):
            return member.__func__
        if inspect.isfunction(member):
            return member
    return None


def _class_line(cls: type, path: Path) -> int:
    """Line of a module-level ``class`` statement (inspect needs the module in sys.modules; it is not)."""
    pattern = re.compile(rf"^class\s+{re.escape(cls.__name__)}\b")
    with contextlib.suppress(OSError):
        for number, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if pattern.match(text):
                return number
    return 0


def select(subjects: list[Subject], selector: str | None, target: str) -> list[Subject]:
    """Apply a ``::NAME`` selector: an exact name, or a class and all its methods."""
    if selector is None:
        return subjects
    chosen = [s for s in subjects if s.name == selector or s.name.startswith(selector + ".") or selector in s.aliases]
    if not chosen:
        names = [s.name for s in subjects]
        available = f"; it defines {', '.join(names)}" if names else "; it defines no custom gradients"
        raise TargetError(f"{target}: no function or layer named '{selector}'{closest(selector, names)}{available}")
    return chosen
