"""Which public functions, methods and layer ``call`` methods make custom gradients as they run.

Most real code does not decorate a module-level function: the public
function defines ``@tf.custom_gradient def inner`` in its body (TensorFlow's
own ``tf.nn.silu``), calls ``tf.custom_gradient(fn)``, or calls a helper
that does (TFP's ``custom_gradient(vjp_fwd=..., vjp_bwd=...)``, Keras's
``keras.ops.custom_gradient``, a user's own factory). This module finds
those candidates without calling anything: it reads the names a function's
code (nested functions and lambdas included) uses and resolves them in the
function's own globals, closure and defaults, as the interpreter would, so
``tf2.custom_gradient``, ``custom_gradient.custom_gradient`` and a
decorator bound under another name are all seen. A check then confirms the
candidate by recording which custom gradients a call really reaches
(:mod:`gradcheck.targets.nested`).

A function that reaches custom gradients only through module-level
custom-gradient functions is not a candidate: those are checked themselves.
"""

from __future__ import annotations

import ast
import contextlib
import dis
import functools
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gradcheck import _tf
from gradcheck.source_reading import function_definition, own_nodes, plain_function

#: How deep calls into helper functions are followed.
_MAX_DEPTH = 6
#: No call back into a visit under way (see NestingReader._cycle_to).
_NO_CYCLE = _MAX_DEPTH + 1


def code_names(code: Any) -> list[str]:
    """Every global or attribute name ``code`` and the code nested in it use, in order."""
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names.extend(code_names(const))
    return list(dict.fromkeys(names))


#: The instructions that read (or write) a name in the module's globals rather than an attribute.
_GLOBAL_ACCESS = frozenset(("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_FROM_DICT_OR_GLOBALS"))
#: The instructions that read a name as an attribute of an object (a module, a class).
_ATTRIBUTE_ACCESS = frozenset(("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR", "IMPORT_FROM"))


# Kept across modules: a walk of a big package meets the same helpers (TensorFlow's nest, dispatch) from
# every module's reader, and reading their bytecode was most of the time `gradcheck list tensorflow` took.
@functools.lru_cache(maxsize=1 << 16)
def _names_read(code: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The names ``code`` and the code nested in it read as globals, and those it reads as attributes.

    ``tf.compat.v1.py_func`` reads ``tf`` as a global and ``py_func`` only as an attribute, never the module's
    own ``py_func``; ``custom_gradient.generate_name()`` reads the module ``custom_gradient`` as a global,
    never the decorator of that name the module holds.
    """
    globals_: set[str] = set()
    attributes: set[str] = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname in _GLOBAL_ACCESS:
            globals_.add(instruction.argval)
        elif instruction.opname in _ATTRIBUTE_ACCESS:
            attributes.add(instruction.argval)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            nested_globals, nested_attributes = _names_read(const)
            globals_ |= nested_globals
            attributes |= nested_attributes
    return frozenset(globals_), frozenset(attributes)


def _values_seen(func: Any, names: list[str]) -> Iterator[Any]:
    """The objects ``func``'s names resolve to: globals, attributes of global modules and
    classes (two levels: ``keras.ops.custom_gradient``), closure cells and defaults."""
    namespace = getattr(func, "__globals__", {})
    code = getattr(func, "__code__", None)
    read, read_as_attributes = _names_read(code) if code is not None else (frozenset(names), frozenset(names))
    attributes = [name for name in names if name in read_as_attributes]
    for name in names:
        if name not in namespace or name not in read:
            continue
        value = namespace[name]
        yield value
        if isinstance(value, (ModuleType, type)):
            for attr in attributes:
                member = _attribute(value, attr)
                if member is None:
                    continue
                yield member
                if isinstance(member, ModuleType):
                    yield from (m for a in attributes if (m := _attribute(member, a)) is not None)
    for cell in getattr(func, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            yield cell.cell_contents
    yield from getattr(func, "__defaults__", None) or ()
    yield from (getattr(func, "__kwdefaults__", None) or {}).values()


def _attribute(owner: Any, name: str) -> Any:
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        return None


def _followed(value: Any, home: str) -> bool:
    """Whether calls into ``value`` are followed: the home package's code, or code outside TF/Keras."""
    module = _tf.attribute(value, "__module__", "") or ""
    top = module.partition(".")[0] if isinstance(module, str) else ""
    return top == home or not (_tf.is_tf_own(value) or top in sys.stdlib_module_names or top == "numpy")


class NestingReader:
    """Answers "does this function make custom gradients as it runs?" for one module's code."""

    def __init__(self, module: ModuleType | str) -> None:
        name = module if isinstance(module, str) else module.__name__
        #: The top-level package whose code is followed even where it is TensorFlow's own.
        self.home = name.partition(".")[0]
        self._memo: dict[int, bool] = {}
        #: A "no" found with a depth bound: the most levels below the code within which nothing reaches.
        self._none_within: dict[int, int] = {}
        #: Whether the visit under way met the depth bound; the depth of the shallowest visit on its path
        #: that it called back into (recursion), or _NO_CYCLE.
        self._depth_cut = False
        self._cycle_to = _NO_CYCLE
        #: The module's private module-level custom gradients, by identity: calling one makes a custom
        #: gradient as much as defining it does (they are checked through their public callers).
        self._private = {} if isinstance(module, str) else private_custom_gradients(module)
        #: Of those, the names each visited code reaches (its own calls and its helpers'), by code.
        self._private_reached: dict[int, frozenset[str]] = {}

    def reaches(self, obj: Any, cls: type | None = None) -> bool:
        """True when ``obj`` (or what it calls) applies a custom-gradient decorator as it runs (or calls one of
        the module's private custom gradients)."""
        function = plain_function(obj)
        # A wrapper made with functools.wraps (TensorFlow's dispatch, a user's decorator) may make
        # the custom gradient itself, or the function it wraps may: look at each layer.
        for _ in range(8):
            if self._visit(function, cls, 0, {}):
                return True
            inner = _tf.attribute(function, "__wrapped__")
            if inner is None or inner is function:
                return False
            function = plain_function(inner)
        return False

    def private_reached(self, obj: Any, cls: type | None = None) -> frozenset[str]:
        """The module's private custom gradients that ``obj`` (or what it calls) calls, by name.

        Valid after :meth:`reaches` asked about ``obj``.
        """
        code = _tf.attribute(plain_function(obj), "__code__")
        return self._private_reached.get(id(code), frozenset()) if code is not None else frozenset()

    def _visit(self, func: Any, cls: type | None, depth: int, path: dict[int, int]) -> bool:
        code = _tf.attribute(func, "__code__")
        if code is None:
            return False
        key = id(code)
        if key in self._memo:
            return self._memo[key]
        levels = _MAX_DEPTH - depth
        if key in path:
            self._cycle_to = min(self._cycle_to, path[key])
            return False
        if levels < 0 or self._none_within.get(key, -1) >= levels:
            # A "no" within the levels left: what this visit is part of may yet reach deeper elsewhere.
            self._depth_cut = True
            return False
        names = code_names(code)
        if self._marked(names):
            self._memo[key] = True
            return True
        values = list(_values_seen(func, names))
        members = [m for m in (class_member(cls, name) for name in names) if m is not None] if cls else []
        # Every value is looked at (no short cut): the private custom gradients reached are recorded too.
        outer = (self._depth_cut, self._cycle_to)
        self._depth_cut, self._cycle_to = False, _NO_CYCLE
        path[key] = depth
        try:
            made = [self._makes(value, depth, path) for value in values]
            made += [self._member_makes(member, cls, depth, path) for member in members if cls is not None]
        finally:
            del path[key]
        self._private_reached[key] = frozenset(
            name for value in (*values, *members) for name in self._reached_through(value)
        )
        reached = any(made)
        # A "no" found below the depth bound holds for as many levels as were left: remembered as a plain
        # "no", it hid a public function that another reached deep down (TFP's lbeta); not remembered at
        # all, every public function of TensorFlow's own modules walked the same calls again (minutes).
        # A "no" through a call back into a visit above this one holds once that visit's answer is known:
        # remembered there, not here.
        inside_cycle = self._cycle_to < depth
        if reached or not (self._depth_cut or inside_cycle):
            self._memo[key] = reached
        elif not inside_cycle:
            self._none_within[key] = max(levels, self._none_within.get(key, -1))
        self._depth_cut = outer[0] or self._depth_cut
        self._cycle_to = min(outer[1], self._cycle_to)
        return reached

    def _reached_through(self, value: Any) -> frozenset[str]:
        """The private custom gradients ``value`` is, or its visited code reaches."""
        if id(value) in self._private:
            return frozenset((self._private[id(value)],))
        code = _tf.attribute(plain_function(_called_code(value)), "__code__")
        return self._private_reached.get(id(code), frozenset()) if code is not None else frozenset()

    def _marked(self, names: list[str]) -> bool:
        """Whether code using ``names`` reaches what is looked for by itself (none: a decorator must be called)."""
        return False

    def _is_marker(self, value: Any) -> bool:
        """Whether calling ``value`` is what is looked for: a custom-gradient decorator."""
        return _tf.is_custom_gradient_decorator(value)

    def for_others(self, function: Any) -> bool:
        """Whether ``function`` makes custom gradients for others (a factory): no target, what it returns is."""
        return _is_factory(function)

    def _makes(self, value: Any, depth: int, path: dict[int, int]) -> bool:
        if self._is_marker(value):
            return True
        if id(value) in self._private:
            return True  # checked through its public callers
        if isinstance(value, (ModuleType, type)) or _tf.custom_gradient_parts(value):
            return False  # a public module-level custom-gradient function is checked on its own
        function = plain_function(_called_code(value))
        if inspect.isfunction(function) and _followed(function, self.home):
            return self._visit(function, None, depth + 1, path)
        return False

    def _member_makes(self, member: Any, cls: type, depth: int, path: dict[int, int]) -> bool:
        """A method of the same class: a custom-gradient method counts (layers read ``self.kernel``)."""
        if _tf.custom_gradient_parts(plain_function(member)) is not None:
            return True
        return self._visit(plain_function(member), cls, depth + 1, path)


def _called_code(value: Any) -> Any:
    """What calling ``value`` runs: a function itself; for an instance of a class, its ``__call__``
    (a callable object kept at module level, as ``flip_gradient = FlipGradientBuilder()``)."""
    if isinstance(value, (ModuleType, type)) or inspect.isfunction(plain_function(value)) or not callable(value):
        return value
    call = _tf.attribute(type(value), "__call__")
    return call if inspect.isfunction(call) else value


def private_custom_gradients(module: ModuleType) -> dict[int, str]:
    """The private module-level custom-gradient functions ``module`` defines, by identity, with their names."""
    return {
        id(value): name
        for name, value in list(vars(module).items())
        if name.startswith("_")
        and not (name.startswith("__") and name.endswith("__"))
        and (parts := _tf.custom_gradient_parts(value)) is not None
        and _tf.attribute(parts.forward, "__module__") == module.__name__
    }


def class_member(cls: type, name: str) -> Any:
    """A member of ``cls`` or of one of its user-defined bases (not Keras's own), as stored."""
    for klass in cls.__mro__:
        if klass is object or _tf.is_tf_own(klass):
            continue
        if name in vars(klass):
            return vars(klass)[name]
    return None


@dataclass(frozen=True)
class Candidate:
    """A function or method that makes custom gradients as it runs, as discovery found it."""

    name: str
    """``func`` or ``Class.method``."""
    obj: Any
    """As the module or class holds it."""
    owner: type | None
    """The class of a method."""
    binding: str
    """``function``, ``staticmethod``, ``classmethod`` or ``method``."""
    private_reached: frozenset[str] = frozenset()
    """The module's private custom gradients it calls (checked through it)."""


def candidates(module: ModuleType, taken: set[str], reader: NestingReader | None = None) -> list[Candidate]:
    """Each public function or method ``module`` defines that makes custom gradients as it runs (as
    ``reader`` reads it, by default :class:`NestingReader`), except the names in ``taken`` (found otherwise).

    A private function (``_helper``) is listed only when named explicitly:
    it is checked through the public functions that call it.
    """
    reader = reader if reader is not None else NestingReader(module)
    found: list[Candidate] = []
    for name, obj in list(vars(module).items()):
        if inspect.isclass(obj):
            if obj.__module__ == module.__name__ and not _tf.is_keras_layer_class(obj):
                found.extend(_method_candidates(reader, name, obj, taken))
            continue
        function = plain_function(obj)
        if name in taken or not inspect.isfunction(function) or function.__module__ != module.__name__:
            continue
        if _tf.custom_gradient_parts(obj) is None and not reader.for_others(function) and reader.reaches(function):
            found.append(Candidate(name, obj, None, "function", reader.private_reached(function)))
    return [entry for entry in found if not entry.name.rpartition(".")[2].startswith("_")]


def _method_candidates(reader: NestingReader, cls_name: str, cls: type, taken: set[str]) -> Iterator[Candidate]:
    for attr, member in vars(cls).items():
        name = f"{cls_name}.{attr}"
        function = plain_function(member)
        if name in taken or not inspect.isfunction(function) or attr.startswith("__"):
            continue
        if _tf.custom_gradient_parts(member) is not None or _tf.custom_gradient_parts(function) is not None:
            continue
        binding = (
            "staticmethod"
            if isinstance(member, staticmethod)
            else "classmethod"
            if isinstance(member, classmethod)
            else "method"
        )
        if not reader.for_others(function) and reader.reaches(function, cls):
            yield Candidate(name, function, cls, binding, reader.private_reached(function))


def _is_factory(function: Any) -> bool:
    """True for a decorator or factory: it returns functions it makes (``return decorator``, ``return
    lambda ...``, ``return tf.custom_gradient(wrap)``, ``return fw, fa, fg``), or is named after the
    decorator. It makes custom gradients (or applies registered ones) for others: the functions it
    returns are the targets."""
    if "custom_gradient" in function.__name__:
        return True
    code = function.__code__
    # What a factory returns is made in its code (a def, a lambda) or by custom_gradient: without either
    # there is no source to read (reading it for every function of TensorFlow's own modules took minutes).
    if "custom_gradient" not in code.co_names and not any(hasattr(c, "co_names") for c in code.co_consts):
        return False
    definition = function_definition(function)
    if definition is None:
        return _returns_defined_function(code)
    own = [node for node, _ in own_nodes(definition, set(), into_functions=False)]
    defined = {n.name for n in own if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assigned = {
        target.id: node.value
        for node in own
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def made(node: ast.AST | None, depth: int = 0) -> bool:
        if isinstance(node, ast.Lambda):
            return True
        if isinstance(node, ast.Name):
            return node.id in defined or (depth < 4 and made(assigned.get(node.id), depth + 1))
        if isinstance(node, ast.Call):
            callee = node.func
            return (
                callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            ) == "custom_gradient"
        if isinstance(node, (ast.Tuple, ast.List)):
            return bool(node.elts) and all(made(element, depth) for element in node.elts)
        return False

    return any(made(node.value) for node in own if isinstance(node, ast.Return))


def _returns_defined_function(code: Any) -> bool:
    """:func:`_is_factory` read from bytecode, where there is no source: a return of a function it defines."""
    nested = {const.co_name for const in code.co_consts if hasattr(const, "co_name")}
    previous = None
    for instruction in dis.get_instructions(code):
        if instruction.opname == "RETURN_VALUE" and previous is not None:
            if previous.opname == "MAKE_FUNCTION":
                return True
            if previous.opname in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE") and previous.argval in nested:
                return True
        previous = instruction
    return False
