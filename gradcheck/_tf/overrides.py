"""Gradients registered with ``tf.RegisterGradient`` and applied with ``gradient_override_map``: where they apply.

``graph.gradient_override_map({"Identity": "Flip"})`` sets, on each op of a
mapped type that ``graph`` builds inside the block, an attribute naming the
registered gradient; TensorFlow reads it only where it builds a gradient from
the graph (``tf.gradients``, or a ``GradientTape`` differentiating a
``tf.function`` call from outside it). So in TensorFlow 2 (measured with 2.21):

- eagerly, ops are not built in a graph: the map changes nothing, and the tape
  uses the gradient registered for the op's own type;
- inside a ``tf.function``, the map applies where it is entered on the graph
  being built (``tf.compat.v1.get_default_graph()`` read at call time) and
  that function's gradient is taken from outside it; a ``GradientTape``
  inside the same ``tf.function`` (a custom training loop's train step,
  Keras 3's ``fit``) records the op itself and ignores it;
- a map entered on another graph (one captured at import, as TF1 code kept
  ``G = tf.get_default_graph()`` or ``K.get_session().graph``) never applies.

:class:`Overrides` records, while active, each map the user's code enters
(TensorFlow's own uses, such as ``tf.custom_gradient``'s inside graphs, are
not the user's) and whether it applied to an op built there.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gradcheck._tf.loading import tensorflow
from gradcheck._tf.objects import is_tf_module, is_tf_own


class Applied:
    """How a map entered by the user's code met the op it names (:attr:`OverrideEntry.applied`)."""

    EAGER = "eager"
    """Entered while executing eagerly: no op is built in a graph, nothing applies."""
    ELSEWHERE = "elsewhere"
    """Entered on a graph other than the one building the ops (a graph captured earlier): nothing applies."""
    UNBUILT = "unbuilt"
    """Entered on the graph being built, which built no op of a mapped type inside the block."""
    CALLER = "caller"
    """Applied on the graph of the ``tf.function`` gradcheck calls the code in: it applies inside tf.function."""
    OWN = "own"
    """Applied on the graph of one of the user's own ``tf.function``s: it applies wherever that one is called."""


@dataclass(frozen=True)
class OverrideEntry:
    """One ``gradient_override_map`` the user's code entered, and whether it applied."""

    mapping: tuple[tuple[str, str], ...]
    """(op type, registered gradient name) pairs, as the map gives them."""
    file: str
    """Where the user's code entered the map."""
    line: int
    applied: str
    """One of :class:`Applied`'s values."""


@dataclass(frozen=True)
class RegisteredGradient:
    """A gradient function in TensorFlow's registry, and where it is defined."""

    name: str
    """The name it is registered under."""
    file: str | None
    """The file of its ``def`` (None where TensorFlow does not know the name)."""
    line: int | None
    tensorflows: bool
    """True for one of TensorFlow's own gradients (``Identity`` mapped onto ``Round``)."""


def registered_gradient(name: str) -> RegisteredGradient:
    """The gradient registered under ``name``, with the file and line of its ``def``."""
    tensorflow()
    from tensorflow.python.framework import ops

    try:
        function = ops.gradient_registry.lookup(name)
    except LookupError:
        return RegisteredGradient(name, None, None, False)
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    if code is None:
        return RegisteredGradient(name, None, None, is_tf_own(function))
    return RegisteredGradient(name, code.co_filename, code.co_firstlineno, is_tf_own(function))


class Overrides:
    """While active, every ``gradient_override_map`` the user's code enters is recorded in :attr:`entries`.

    Process-wide while active (the method of ``tf.Graph`` is replaced):
    gradcheck checks one subject at a time per process.
    """

    def __init__(self) -> None:
        self.entries: list[OverrideEntry] = []
        self._callers: list[Any] = []
        self._saved: Any = None

    def in_function(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """``call`` as a ``tf.function`` of its own, whose gradient a tape outside it takes from its graph.

        A map entered on that graph counts as :attr:`Applied.CALLER`: it applies because
        the code runs inside a ``tf.function``, not because of the user's own.
        """
        tf = tensorflow()

        def traced(*args: Any, **kwargs: Any) -> Any:
            self._callers.append(tf.compat.v1.get_default_graph())
            return call(*args, **kwargs)

        return tf.function(traced, autograph=False)

    def _recorded(self, original: Any, graph: Any, op_type_map: Any, file: str, line: int) -> Iterator[None]:
        tf = tensorflow()
        eager = tf.executing_eagerly()
        building = not eager and tf.compat.v1.get_default_graph() is graph
        before = len(graph.get_operations()) if building else 0
        with original(graph, op_type_map):
            yield
        mapping = tuple((str(k), str(v)) for k, v in op_type_map.items()) if isinstance(op_type_map, dict) else ()
        if eager:
            applied = Applied.EAGER
        elif not building:
            applied = Applied.ELSEWHERE
        elif not any(_overridden(op) for op in graph.get_operations()[before:] if op.type in dict(mapping)):
            applied = Applied.UNBUILT
        else:
            applied = Applied.CALLER if any(graph is caller for caller in self._callers) else Applied.OWN
        self.entries.append(OverrideEntry(mapping, file, line, applied))

    def __enter__(self) -> Overrides:
        tensorflow()
        from tensorflow.python.framework import ops

        original = ops.Graph.gradient_override_map
        self._saved = original
        recorded = contextlib.contextmanager(self._recorded)

        def gradient_override_map(graph: Any, op_type_map: Any) -> Any:
            caller = sys._getframe(1)
            if is_tf_module(str(caller.f_globals.get("__name__", ""))):  # tf.custom_gradient's own, in graphs
                return original(graph, op_type_map)
            return recorded(original, graph, op_type_map, *_source_line(caller))

        ops.Graph.gradient_override_map = gradient_override_map
        return self

    def __exit__(self, *_exc: object) -> None:
        from tensorflow.python.framework import ops

        ops.Graph.gradient_override_map = self._saved


def _source_line(frame: Any) -> tuple[str, int]:
    """The file and line of ``frame`` in the user's source: code autograph converted (the body of a
    ``tf.function``) runs from a generated file, mapped back through the converted function's source map."""
    file, line = frame.f_code.co_filename, frame.f_lineno
    if not os.path.basename(file).startswith("__autograph_generated"):
        return file, line
    outer = frame.f_back
    for _ in range(32):  # autograph's converted_call holds the converted function a few frames out
        if outer is None:
            break
        for value in list(outer.f_locals.values()):
            source_map = getattr(value, "ag_source_map", None)
            origin = _origin(source_map, file, line) if isinstance(source_map, dict) else None
            if origin is not None:
                return origin
        outer = outer.f_back
    return file, line


def _origin(source_map: dict[Any, Any], file: str, line: int) -> tuple[str, int] | None:
    for location, origin in source_map.items():
        if getattr(location, "filename", None) == file and getattr(location, "lineno", None) == line:
            return str(origin.loc.filename), int(origin.loc.lineno)
    return None


def _overridden(op: Any) -> bool:
    """True for an op built under a map: its gradient is the registered one, where a graph's gradient is built."""
    try:
        op.get_attr("_gradient_op_type")
    except ValueError:
        return False
    return True


def shown_location(file: str | None, line: int | None) -> str:
    """``file.py:12`` as messages show a place in the user's code."""
    return f"{os.path.basename(file)}:{line}" if file else "unknown place"


__all__ = [
    "Applied",
    "OverrideEntry",
    "Overrides",
    "RegisteredGradient",
    "registered_gradient",
    "shown_location",
]
