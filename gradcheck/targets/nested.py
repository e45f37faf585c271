"""A nested subject (a function or a Keras layer): checked through the custom gradients it reaches at run time.

The custom run calls it with every outermost custom gradient it reaches
instrumented (one :class:`~gradcheck.instrument.BackwardRecord` per call, as
for a custom-gradient function called directly); the native run calls it
with those custom gradients switched off, so TensorFlow differentiates the
inner forward functions. Every ``tf.function`` the call reaches runs as
plain Python meanwhile, so that a trace made earlier cannot hide a custom
gradient (see :func:`gradcheck._tf.functions_run_eagerly`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from gradcheck import _tf
from gradcheck.instrument import BackwardRecord, instrument


def _instrumenter(records: list[BackwardRecord]) -> _tf.Instrumenter:
    """Make each outermost custom-gradient call report to a new record in ``records``."""

    def make(wrapped: Callable[..., Any], eager: bool) -> Callable[..., Any]:
        record = BackwardRecord()
        records.append(record)
        backward: list[Any] = []

        @functools.wraps(wrapped)  # keeps the forward's parameter names for the record
        def user_forward(*args: Any, **kwargs: Any) -> Any:
            returned = wrapped(*args, **kwargs)
            if isinstance(returned, (tuple, list)) and len(returned) == 2:
                # TFP's helper hides the user's backward function in its closure.
                backward[:] = [_tf.closure_function(returned[1], ("vjp_bwd",)) or returned[1]]
            return returned

        # tf.custom_gradient's result keeps the function it decorates as __wrapped__.
        raw = cast(Any, instrument(user_forward, record, eager, _tf.forward_name(wrapped))).__wrapped__

        def forward(*args: Any, **kwargs: Any) -> Any:
            returned = raw(*args, **kwargs)
            code = getattr(getattr(backward[0], "__func__", backward[0]), "__code__", None) if backward else None
            if code is not None:
                record.line, record.file = code.co_firstlineno, code.co_filename
            return returned

        forward.__name__ = record.function
        return forward

    return make


class NestedTarget:
    """A callable (function or layer) whose custom gradients are found while it runs."""

    def __init__(self, call: Callable[..., Any], name: str) -> None:
        self.call = call
        self.name = name
        #: Names of the custom-gradient forward functions the last custom run reached.
        self.reached: list[str] = []
        #: Call it as written, its ``tf.function``s run as functions: set once it is known to reach no
        #: custom gradient. Its gradient is then TensorFlow's as the code has it: a ``gradient_override_map``
        #: inside a ``tf.function`` applies only when the function runs as one (TensorFlow's tape ignores it).
        self.as_written = False

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call it with each outermost custom gradient it reaches instrumented."""
        if self.as_written:
            return self.call(*args, **kwargs)
        with _tf.functions_run_eagerly(), _tf.ChokePoint(_instrumenter(records)) as choke_point:
            result = self.call(*args, **kwargs)
        self.reached = list(dict.fromkeys(choke_point.names))
        return result

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call it with each outermost custom gradient it reaches switched off."""
        if self.as_written:
            return self.call(*args, **kwargs)
        with _tf.functions_run_eagerly(), _tf.ChokePoint(switch_off=True):
            return self.call(*args, **kwargs)
