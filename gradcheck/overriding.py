"""Which functions, methods and layer ``call`` methods apply registered gradients with ``gradient_override_map``.

TF1-era code registers a gradient function with ``tf.RegisterGradient`` and
applies it to the ops a block builds with
``graph.gradient_override_map({"Identity": "Flip"})``, directly or through a
helper (the classic ``py_func(func, inp, Tout, grad=...)`` recipe, a
callable object kept at module level, closures a factory returned). Such a
function is found as :mod:`gradcheck.nesting` finds custom gradients made as
code runs, by the names its code and the code it calls use, without running
anything; whether the override applies is judged when it runs
(:mod:`gradcheck.kinds.registered`).
"""

from __future__ import annotations

import ast
from types import ModuleType
from typing import Any

from gradcheck import nesting, source_reading

#: The attribute whose use marks code that applies a registered gradient.
MARKER = "gradient_override_map"


class OverrideReader(nesting.NestingReader):
    """Answers "does this function enter a ``gradient_override_map`` as it runs?" for one module's code."""

    def __init__(self, module: ModuleType | str) -> None:
        super().__init__(module if isinstance(module, str) else module.__name__)

    def _marked(self, names: list[str]) -> bool:
        """Code that names ``gradient_override_map`` enters it."""
        return MARKER in names

    def _is_marker(self, value: Any) -> bool:
        """No object is called to apply a registered gradient: the map is entered on a graph."""
        return False

    def for_others(self, function: Any) -> bool:
        """A factory, or a helper that registers the gradient it is given (``py_func(..., grad=...)``)."""
        return super().for_others(function) or registers_given_gradient(function)


def registers_given_gradient(function: Any) -> bool:
    """True for a helper that registers a gradient function it is given: ``tf.RegisterGradient(name)(grad)``.

    It applies gradients for its callers, which pass their own: they are the targets.
    """
    code = getattr(source_reading.unwrapped(function), "__code__", None)
    # Reading the source of every function of a big module (TensorFlow's own) took minutes: the bytecode
    # says at once whether the name is used at all.
    if code is not None and "RegisterGradient" not in nesting.code_names(code):
        return False
    definition = source_reading.function_definition(function)
    if definition is None:
        return False
    arguments = definition.args
    parameters = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    for node in ast.walk(definition):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Call)):
            continue
        callee = node.func.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        if name == "RegisterGradient" and any(isinstance(a, ast.Name) and a.id in parameters for a in node.args):
            return True
    return False
