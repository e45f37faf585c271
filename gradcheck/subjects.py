"""An imported module -> the custom gradients it defines, each a :class:`Subject`.

Like pytest's collector, only objects the module itself defined are kept,
in definition order, one subject per object (aliases are names of it).
:func:`subject_of` is the one way an object becomes a subject, for
discovery walking a module and for ``gradcheck.check`` alike.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from gradcheck import _tf, nesting
from gradcheck.config import closest
from gradcheck.errors import TargetError
from gradcheck.kinds import SubjectKind, kind_named
from gradcheck.kinds.product import takes_only_args
from gradcheck.overriding import OverrideReader
from gradcheck.paths import display_path


@dataclass(frozen=True)
class Subject:
    """One custom-gradient function (or layer) found in a module."""

    name: str
    """Name in its module: ``func``, or ``Class.method`` for methods."""
    kind: SubjectKind
    """What kind of subject it is (:mod:`gradcheck.kinds`): everything that differs by kind is asked of it."""
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
    module: ModuleType | None = None
    """The module that defines it."""
    patches: tuple[tuple[dict[str, Any], str], ...] = ()
    """For a layer: the (namespace, name) of each custom-gradient function its ``call`` reaches."""
    reaches: tuple[str, ...] = ()
    """For a layer: the names of those functions, for listings."""
    explicit: bool = False
    """Named by ``::NAME`` or a config table: checked even where it reaches no custom gradient."""
    aliases: tuple[str, ...] = ()
    """Other names the module gives the same object (``Alias = Layer``): checked once, under ``name``."""

    @property
    def id(self) -> str:
        """``path::name``, as reports show it and ``::`` selects it (read by :func:`~gradcheck.results.split_id`)."""
        return f"{self.path}::{self.name}"


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
        return _nested_callable(obj) if place is None else None
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
    kind = kind_named(_binding(place, forward) if parts is not None else "wrapper")
    line = _def_line(forward)
    if place is not None and kind.positional_guesses:  # made by a factory: where the module binds it
        line = _top_level_line(place.name, place.path) or line
    return Subject(
        name=name,
        kind=kind,
        path=shown,
        line=line,
        obj=obj,
        forward=forward,
        decorators=parts.decorators if parts is not None else (wrapper[0],),  # type: ignore[index]
        input_signature=parts.input_signature if parts is not None else None,
        owner=place.owner if place is not None else None,
        module=place.module if place is not None else inspect.getmodule(forward),
    )


def _binding(place: Place | None, forward: Any) -> str:
    """The kind of a custom-gradient function: as its place binds it; a ``(*args)`` function a product."""
    binding = place.binding if place is not None else "function"
    return "product" if binding == "function" and takes_only_args(forward) else binding


def _nested_callable(obj: Any) -> Subject | None:
    """A nested subject handed to ``gradcheck.check``: a function or bound method that makes custom gradients as it
    runs (or, of the registered kind, enters a ``gradient_override_map``)."""
    function = nesting.plain_function(obj)
    if not inspect.isfunction(function):
        return None
    how = reached_as(obj, function.__module__ or "")
    if how is None:
        return None
    shown = _shown_source(function)
    name = function.__qualname__
    return Subject(
        name=name,
        kind=kind_named(f"{how} function"),
        path=shown,
        line=_def_line(function),
        obj=obj,
        forward=obj,
        module=inspect.getmodule(function),
        explicit=True,
    )


def reached_as(obj: Any, home: ModuleType | str, cls: type | None = None) -> str | None:
    """How ``obj`` reaches its gradients as it runs: ``nested`` (it makes custom gradients, or calls one of its
    module's private ones), ``registered`` (it enters a ``gradient_override_map``), or None."""
    if nesting.NestingReader(home).reaches(obj, cls):
        return "nested"
    return "registered" if OverrideReader(home).reaches(obj, cls) else None


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
    through_callers: set[str] = set()
    for how, reader in (("nested", nesting.NestingReader(module)), ("registered", OverrideReader(module))):
        for candidate in nesting.candidates(module, taken, reader):
            place = Place(candidate.name, path, module, candidate.owner, candidate.binding)
            subjects.append(_nested_subject(candidate.obj, place, candidate.name in named, how))
            taken.add(candidate.name)
            through_callers |= candidate.private_reached
    for name in sorted(named):
        if name not in taken and (explicit := _explicit_subject(module, path, name)) is not None:
            subjects.append(explicit)
    through_callers |= _private_reached_by_layers(subjects, module)
    # A private custom gradient a public function calls is checked through it; alone only when named.
    subjects = [s for s in subjects if s.name not in through_callers or s.name in named]
    subjects.sort(key=lambda s: s.line)
    return subjects


def _private_reached_by_layers(subjects: list[Subject], module: ModuleType) -> set[str]:
    """The module's private custom gradients that its layers' ``call``s reach by name."""
    namespace = vars(module)
    return {name for s in subjects for space, name in s.patches if space is namespace and name.startswith("_")}


def _one_per_object(subjects: list[Subject]) -> list[Subject]:
    """One subject per object: an alias (``Alias = Layer``) is a name of the same subject, not another one.

    The subject keeps the name that defines the object (its ``__name__``),
    else the first; the other names are its ``aliases``.
    """
    groups: dict[Hashable, list[Subject]] = {}
    for subject in subjects:
        groups.setdefault(subject.kind.identity(subject), []).append(subject)
    kept = []
    for group in groups.values():
        defining = next((s for s in group if s.name.rsplit(".", 1)[-1] == _own_name(s)), group[0])
        others = tuple(s.name for s in group if s is not defining)
        kept.append(replace(defining, aliases=defining.aliases + others) if others else defining)
    return kept


def _own_name(subject: Subject) -> str | None:
    """The name the ``def`` or ``class`` statement gave the object (a function's ``__name__`` can be reassigned)."""
    obj: Any = subject.forward if subject.forward is not None else subject.owner
    try:
        code = getattr(inspect.unwrap(obj), "__code__", None)
        return code.co_name if code is not None else getattr(obj, "__name__", None)
    except Exception:
        return None


def _nested_subject(function: Any, place: Place, explicit: bool = False, how: str = "nested") -> Subject:
    """A nested function or method: checked through the gradients it reaches as it runs (``how``: ``nested``, or
    ``registered``, the nested kind that applies registered gradients; see :func:`reached_as`)."""
    forward = nesting.plain_function(function)
    shown = display_path(place.path)
    return Subject(
        name=place.name,
        kind=kind_named(f"{how} {place.binding}"),
        path=shown,
        line=_def_line(forward),
        obj=function,
        forward=forward,
        owner=place.owner,
        module=place.module,
        explicit=explicit,
    )


def _explicit_subject(module: ModuleType, path: Path, name: str) -> Subject | None:
    """A function, method or Keras layer ``module`` defines, named by the user: checked anyway."""
    owner_name, _, member = name.rpartition(".")
    owner = vars(module).get(owner_name) if owner_name else None
    obj = vars(owner).get(member) if isinstance(owner, type) else vars(module).get(name)
    if owner_name and not isinstance(owner, type):
        return None
    if owner is None and isinstance(obj, type) and _tf.is_keras_layer_class(obj) and obj.__module__ == module.__name__:
        call = getattr(obj, "call", None)
        if call is None:
            return None
        how = reached_as(call, module, obj) or "nested"
        return _placed_layer(obj, obj, Place(name, path, module), call, kind_named(f"{how} layer"), explicit=True)
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
    how = reached_as(obj, module, owner) or "nested"
    return _nested_subject(obj, Place(name, path, module, owner, binding), True, how)


def _layer_subject(obj: Any, cls: type, place: Place | None) -> Subject | None:
    """A Keras layer (class, or instance without ``place``) whose ``call`` reaches custom-gradient functions."""
    call = vars(cls).get("call") or getattr(cls, "call", None)
    if call is None or not hasattr(call, "__code__"):
        return None
    patches = reached_custom_gradients(call, cls)
    if not patches:
        # A layer whose call makes custom gradients as it runs (a custom-gradient method, or one nested in
        # call), or applies registered ones.
        how = reached_as(call, cls.__module__ if place is None else place.module, cls)
        return _placed_layer(obj, cls, place, call, kind_named(f"{how} layer")) if how is not None else None
    reaches = tuple(dict.fromkeys(n for _, n in patches))
    return _placed_layer(obj, cls, place, call, kind_named("layer"), patches=tuple(patches), reaches=reaches)


def _placed_layer(obj: Any, cls: type, place: Place | None, call: Any, kind: SubjectKind, **how: Any) -> Subject:
    """The subject of a layer, named where discovery found it (else by its class and ``call``'s file)."""
    module: ModuleType | None
    if place is not None:
        name, shown, module = place.name, display_path(place.path), place.module
        line = _top_level_line(cls.__name__, place.path)
    else:
        source = call.__code__.co_filename
        name, shown, line = cls.__name__, display_path(Path(source)), 0
        module = sys.modules.get(cls.__module__)
    return Subject(
        name=name,
        kind=kind,
        path=shown,
        line=line,
        obj=obj,
        forward=None,
        owner=cls,
        module=module,
        **how,
    )


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
        names = nesting.code_names(code)
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


def _top_level_line(name: str, path: Path) -> int:
    """Line of the module-level ``class``, ``def`` or assignment that binds ``name`` (inspect needs the module in
    sys.modules; it is not)."""
    pattern = re.compile(rf"^((class|def)\s+{re.escape(name)}\b|{re.escape(name)}\s*=[^=])")
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
