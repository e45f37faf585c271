"""The custom-gradient choke point: record, instrument or switch off every custom gradient a call reaches."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from gradcheck._tf.loading import tensorflow
from gradcheck._tf.objects import forward_name

# -- the custom-gradient choke point ----------------------------------------------------
#
# ``tf.custom_gradient(f)`` returns a ``Bind``; calling it runs
# ``custom_gradient.<locals>.decorated``, which looks up ``_eager_mode_decorator`` /
# ``_graph_mode_decorator`` as globals of ``tensorflow.python.ops.custom_gradient`` at call
# time. Replacing those two globals for the duration of a call sees every custom gradient the
# call reaches, however the decorator was looked up (``tf.custom_gradient``, an alias, ``from
# ... import custom_gradient``, ``keras.ops.custom_gradient``, TFP's internal helper, a user's
# factory) and whenever it was applied (per call, or at import time). Patching the public
# decorator where it is looked up would miss everything decorated before the patch.
#
# Only the *outermost* calls are instrumented or switched off: a custom gradient reached
# inside another one's forward or backward function is part of that function (TFP's ``stdtr``
# forward calls ``betainc``, whose custom gradient supplies derivatives the raw op lacks).

#: Builds the instrumented forward for one outermost call: ``(forward, eager) -> forward'``.
Instrumenter = Callable[[Callable[..., Any], bool], Callable[..., Any]]


def _custom_gradient_module() -> Any:
    tensorflow()
    from tensorflow.python.ops import custom_gradient as module

    return module


def is_custom_gradient_decorator(obj: Any) -> bool:
    """True for ``tf.custom_gradient`` itself, Keras's, TFP's helper, or any function named so.

    A user's own factory called ``custom_gradient`` counts too: it makes custom gradients.
    """
    if isinstance(obj, type) or not callable(obj):
        return False
    if getattr(obj, "__name__", None) == "custom_gradient":
        return True
    tf = sys.modules.get("tensorflow")
    return tf is not None and obj is getattr(tf, "custom_gradient", None)


class ChokePoint:
    """While active, every outermost custom-gradient call is instrumented, or switched off.

    ``instrumenter`` (custom runs) gets the undecorated forward function of
    each outermost call and returns the one TensorFlow decorates instead;
    with ``switch_off`` (native runs) the forward runs undecorated and its
    backward function is dropped, so TensorFlow differentiates it. ``calls``
    counts the outermost calls seen. Process-wide while active: gradcheck
    checks one subject at a time per process.
    """

    def __init__(self, instrumenter: Instrumenter | None = None, switch_off: bool = False) -> None:
        self.instrumenter = instrumenter
        self.switch_off = switch_off
        self.calls = 0
        self.names: list[str] = []
        self._depth = 0
        self._saved: tuple[Any, Any] | None = None

    def _intercept(self, original: Any, wrapped: Callable[..., Any], args: tuple, kwargs: dict, eager: bool) -> Any:
        if self._depth > 0:  # inside another custom gradient: part of it, left on
            return original(wrapped, args, kwargs)
        self.calls += 1
        self.names.append(forward_name(wrapped))
        if self.switch_off:
            self._depth += 1
            try:
                result, _unused_grad_fn = wrapped(*args, **kwargs)
            finally:
                self._depth -= 1
            return result
        forward = self._nested(self.instrumenter(wrapped, eager) if self.instrumenter else wrapped)
        return original(forward, args, kwargs)

    def _nested(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        """``forward`` counting as "inside a custom gradient" while it (and its backward) run."""

        def inside(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                result, grad_fn = forward(*args, **kwargs)
            finally:
                self._depth -= 1
            return result, self._nested_backward(grad_fn)

        inside.__name__ = getattr(forward, "__name__", "forward")
        return inside

    def _nested_backward(self, grad_fn: Any) -> Any:
        if not callable(grad_fn):
            return grad_fn
        from tensorflow.python.util import tf_decorator

        def backward(*upstreams: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                return grad_fn(*upstreams, **kwargs)
            finally:
                self._depth -= 1

        # TensorFlow reads the backward's signature (``variables``): keep the one it wraps.
        return tf_decorator.make_decorator(grad_fn, backward, decorator_name="gradcheck_reach")

    def __enter__(self) -> ChokePoint:
        module = _custom_gradient_module()
        eager, graph = module._eager_mode_decorator, module._graph_mode_decorator
        self._saved = (eager, graph)
        module._eager_mode_decorator = lambda f, a, k: self._intercept(eager, f, a, k, True)
        module._graph_mode_decorator = lambda f, a, k: self._intercept(graph, f, a, k, False)
        return self

    def __exit__(self, *_exc: object) -> None:
        module = _custom_gradient_module()
        assert self._saved is not None
        module._eager_mode_decorator, module._graph_mode_decorator = self._saved


@contextlib.contextmanager
def functions_run_eagerly() -> Iterator[None]:
    """Run every ``tf.function`` the call reaches as plain Python while active.

    A library's module-level ``tf.function`` (TFP's ``lbeta``) replays the
    trace it made earlier, custom gradient and all: the choke point would see no
    call, and a "native" run would silently be the custom one. Inside
    gradcheck's own ``tf.function`` leg the Python is then traced into that
    graph, so the graph-mode leg stays graph mode.
    """
    tf = tensorflow()
    before = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(before)
