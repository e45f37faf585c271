"""What a function's source says without running it: its ``def``, and the parameters it uses as Python values.

A parameter the code compares with a string, counts a loop with or calls
cannot be drawn as a tensor: the config must give it in ``constants``.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gradcheck import _tf


def plain_function(obj: Any) -> Any:
    """The plain function behind a method, static/class method, partial or ``tf.function``."""
    for _ in range(8):
        if isinstance(obj, (staticmethod, classmethod)) or inspect.ismethod(obj):
            obj = obj.__func__
        elif _tf.has_attribute(obj, "python_function"):  # tf.function
            obj = _tf.attribute(obj, "python_function")
        elif (  # functools.partial
            _tf.has_attribute(obj, "func") and _tf.has_attribute(obj, "args") and not _tf.has_attribute(obj, "__code__")
        ):
            obj = _tf.attribute(obj, "func")
        else:
            return obj
    return obj


def unwrapped(function: Any) -> Any:
    """The function behind ``function``'s wrappers (``functools.wraps`` layers too), or None where its
    ``__wrapped__`` chain loops."""
    try:
        return inspect.unwrap(plain_function(function))
    except ValueError:
        return None


def function_definition(function: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The ``def`` of ``function`` (behind its wrappers) parsed from its source, or None without source."""
    try:
        source = textwrap.dedent(inspect.getsource(unwrapped(function)))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError, ValueError):
        return None
    return next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


_PYTHON_TYPES = {"str", "int", "bool", "float", "Text"}
#: Keyword arguments that take a loop count (``tf.while_loop(..., maximum_iterations=n)``).
_COUNT_KEYWORDS = {"maximum_iterations"}


@dataclass(frozen=True)
class PythonParameter:
    """A parameter the code shows to be a Python value, not a tensor."""

    reason: str
    """What in the code shows it: ``annotated int``, ``called as body_fn(...)``."""
    callable: bool = False
    """It is a function (called, or annotated ``Callable``): the config gives it as ``{ import = ... }``."""


def non_tensor_parameters(function: Any) -> dict[str, PythonParameter]:
    """Parameters the code shows to be Python values, not tensors, each with the reason.

    Read from the source: an annotation ``str``/``int``/``bool``/``float``
    or ``Callable``; a comparison with a string (``mode == "floor"``,
    ``mode in ("a", "b")``); a loop count (``range(n)``,
    ``maximum_iterations=n``); a call of the parameter itself
    (``body_fn(i, state)``, in nested functions too, as TF Quant Finance's
    ``for_loop`` calls its body). Such an argument cannot be drawn: it must
    be set in ``constants``.
    """
    definition = function_definition(function)
    if definition is None:
        return {}
    parameters = [*definition.args.posonlyargs, *definition.args.args, *definition.args.kwonlyargs]
    found: dict[str, PythonParameter] = {}
    for parameter in parameters:
        annotation = ast.unparse(parameter.annotation) if parameter.annotation is not None else ""
        # A string annotation ("Callable[[int], int]") reads as the type it names.
        bare = annotation.strip("'\"").split("[")[0].split(".")[-1]
        if bare in _PYTHON_TYPES or bare == "Callable":
            found[parameter.arg] = PythonParameter(f"annotated {annotation}", callable=bare == "Callable")
    names = {p.arg for p in parameters}
    for node, unshadowed in own_nodes(definition, names):
        for name, use in _python_use(node, unshadowed).items():
            # That it is called says the most: the config gives a callable in its own form.
            if name not in found or (use.callable and not found[name].callable):
                found[name] = use
    return found


def own_nodes(definition: ast.AST, names: set[str], into_functions: bool = True) -> Iterator[tuple[ast.AST, set[str]]]:
    """Every node of ``definition``'s body, with the parameter names not shadowed there.

    A nested function or lambda whose own parameter has the same name uses
    its own argument, not the outer parameter. Without ``into_functions``,
    a nested function, lambda or class is yielded but not entered.
    """
    stack: list[tuple[ast.AST, set[str]]] = [(child, names) for child in ast.iter_child_nodes(definition)]
    while stack:
        node, visible = stack.pop()
        nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            own = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
            own |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
            visible = visible - own
        yield node, visible
        if into_functions or not (nested or isinstance(node, ast.ClassDef)):
            stack.extend((child, visible) for child in ast.iter_child_nodes(node))


def _python_use(node: ast.AST, names: set[str]) -> dict[str, PythonParameter]:
    """The parameters one node uses as Python values, with the reason."""
    found: dict[str, PythonParameter] = {}
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        if any(_is_string(operand) for operand in operands):
            for operand in operands:
                if isinstance(operand, ast.Name) and operand.id in names:
                    found[operand.id] = PythonParameter("compared with a string")
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        found.update(_int_conditions(node.test, names))
    if not isinstance(node, ast.Call):
        return found
    if isinstance(node.func, ast.Name) and node.func.id in names:
        found[node.func.id] = PythonParameter(f"called as {node.func.id}(...)", callable=True)
    counts = [
        (count, "range(...)")
        for count in (node.args if isinstance(node.func, ast.Name) and node.func.id == "range" else [])
    ]
    counts += [(keyword.value, f"{keyword.arg}=...") for keyword in node.keywords if keyword.arg in _COUNT_KEYWORDS]
    for count, how in counts:
        if isinstance(count, ast.Name) and count.id in names:
            found.setdefault(count.id, PythonParameter(f"a loop count, {how.replace('...', count.id)}"))
    return found


def _int_conditions(test: ast.AST, names: set[str]) -> dict[str, PythonParameter]:
    """Parameters a Python condition compares for equality with an int (``if bitW == 32:``: a bit width, a
    mode number): a tensor there does not make a Python bool."""
    found = {}
    for node in ast.walk(test):
        if not (isinstance(node, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)):
            continue
        operands = [node.left, *node.comparators]
        numbers = [o.value for o in operands if isinstance(o, ast.Constant) and type(o.value) is int]
        for operand in operands:
            if numbers and isinstance(operand, ast.Name) and operand.id in names:
                found[operand.id] = PythonParameter(f"compared with {numbers[0]} in a Python condition")
    return found


def _is_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_string(element) for element in node.elts)
    return False
