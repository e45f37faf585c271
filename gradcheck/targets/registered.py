"""A function or layer that applies gradients registered with ``tf.RegisterGradient`` through ``gradient_override_map``.

Its code runs as written, with every ``gradient_override_map`` it enters
recorded (:class:`gradcheck._tf.Overrides`): eagerly as the user's code is
called, and for the ``tf.function`` leg inside a ``tf.function`` of its own,
so that the tape takes that function's gradient from its graph, as
TensorFlow does for a ``tf.function`` differentiated from outside. Its
gradient is TensorFlow's: the registered gradient where the map applies, the
op's own gradient elsewhere. There is no backward function of the user's to
instrument and no custom gradient to switch off: its native run is the same
call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradcheck import _tf
from gradcheck.instrument import BackwardRecord


class RegisteredTarget:
    """A callable (function or layer) whose registered gradients apply where TensorFlow applies them."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call
        #: Every map the code entered in the calls so far (a ``tf.function`` of the user's is traced once).
        self.entries: list[_tf.OverrideEntry] = []

    def _run(self, args: list[Any], kwargs: dict[str, Any], eager: bool) -> Any:
        with _tf.Overrides() as overrides:
            call = self.call if eager else overrides.in_function(self.call)
            try:
                return call(*args, **kwargs)
            finally:
                self.entries.extend(overrides.entries)

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call it as written; inside the ``tf.function`` leg, as a ``tf.function`` of its own."""
        return self._run(args, kwargs, eager)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The same call: TensorFlow's gradient, as written, is the one checked (against finite differences)."""
        return self._run(args, kwargs, eager=True)
