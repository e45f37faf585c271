"""The one module that imports TensorFlow and reads its internals.

Everything else asks this module for ``tf`` so that ``import gradcheck`` and
``gradcheck --help`` never pay TensorFlow's import time, and so that the
private attributes we rely on (``_tf_decorator``, ``tf_decorator.unwrap``)
are read in one place that a TensorFlow upgrade can break only once.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gradcheck.errors import TensorFlowMissing

_VERBOSE = False


def set_verbose(verbose: bool) -> None:
    """Let TensorFlow's own log lines through (``-v``) or keep them out."""
    global _VERBOSE
    _VERBOSE = verbose


@contextlib.contextmanager
def _stderr_fd_silenced() -> Iterator[None]:
    """Silence file descriptor 2 while TensorFlow's C++ runtime starts.

    TF 2.21 prints absl and oneDNN lines straight to fd 2 during import even
    with TF_CPP_MIN_LOG_LEVEL=3, below Python's ``sys.stderr``.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def tensorflow() -> Any:
    """Import TensorFlow once, quietly, and return the module."""
    module = sys.modules.get("tensorflow")
    if module is not None and hasattr(module, "custom_gradient"):
        return module
    if _VERBOSE:
        try:
            import tensorflow as module
        except ImportError as error:
            if error.name in ("tensorflow", None):
                raise TensorFlowMissing() from error
            raise
        return module
    previous = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    try:
        with _stderr_fd_silenced():
            import tensorflow as module
    except ImportError as error:
        if error.name in ("tensorflow", None) or "tensorflow" in str(error.name):
            raise TensorFlowMissing() from error
        raise
    finally:
        if previous is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        else:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = previous
    return module


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep TensorFlow's Python warnings (retracing and the like) out of reports, unless ``-v``.

    Each checked function gets a ``tf.function`` of its own, traced once per
    shape; TensorFlow's heuristic warns about that as "retracing" although no
    function is traced twice.
    """
    tf = tensorflow()
    # Unfiltered tracebacks keep TensorFlow's own frames, so an error can be
    # told apart from a bug in gradcheck, and the user's frame found.
    filtering = tf.debugging.is_traceback_filtering_enabled()
    tf.debugging.disable_traceback_filtering()
    logger = tf.get_logger()
    level = logger.level
    if not _VERBOSE:
        logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)
        if filtering:
            tf.debugging.enable_traceback_filtering()


def tensorflow_available() -> bool:
    """True when TensorFlow can be imported (without importing it)."""
    if "tensorflow" in sys.modules:
        return True
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


@dataclass(frozen=True)
class CustomGradientParts:
    """What a custom-gradient object is made of."""

    forward: Callable[..., Any]
    """The undecorated function: returns ``(result, grad_fn)``."""
    decorators: tuple[str, ...]
    """Decorator names from the outside in, e.g. ``('tf.function', 'custom_gradient')``."""
    input_signature: tuple[Any, ...] | None
    """The ``input_signature`` of an enclosing ``tf.function``, if any."""


def _decorator_chain(obj: Any) -> tuple[list[Any], Any]:
    """``tf_decorator.unwrap`` without importing TensorFlow for plain objects."""
    if getattr(obj, "_tf_decorator", None) is None:
        return [], obj
    from tensorflow.python.util import tf_decorator

    return tf_decorator.unwrap(obj)


def custom_gradient_parts(obj: Any) -> CustomGradientParts | None:
    """The parts of ``obj`` if it is a ``@tf.custom_gradient`` function, else None.

    Sees through ``tf.function`` and other TF decorators stacked on top;
    ``tf_decorator.unwrap`` returns them outermost first.
    """
    try:
        decorators, target = _decorator_chain(obj)
    except Exception:  # an object whose attribute access raises is not ours to check
        return None
    names = tuple(getattr(d, "decorator_name", "") for d in decorators)
    if "custom_gradient" not in names or not callable(target):
        return None
    signature = getattr(obj, "input_signature", None)
    return CustomGradientParts(
        forward=target,
        decorators=names,
        input_signature=tuple(signature) if signature is not None else None,
    )


def flatten_with_paths(structure: Any) -> list[tuple[str, Any]]:
    """``tf.nest.flatten`` with each leaf's path (``"a/0"``); TF's public API has no such function."""
    from tensorflow.python.util import nest

    return nest.flatten_with_joined_string_paths(structure)


def is_keras_variable(value: Any) -> bool:
    """True for a Keras 3 variable (which is not a ``tf.Variable`` but wraps one)."""
    return any(cls.__name__ == "Variable" and cls.__module__.startswith("keras") for cls in type(value).__mro__)


def underlying_variable(value: Any) -> Any:
    """The ``tf.Variable`` behind a Keras 3 variable (or the variable itself)."""
    return value.value if is_keras_variable(value) else value


def is_keras_layer_class(obj: Any) -> bool:
    """True for a subclass of Keras's ``Layer`` (Keras 3 or tf.keras), without importing Keras."""
    if not isinstance(obj, type):
        return False
    return any(cls.__name__ == "Layer" and cls.__module__.startswith(("keras", "tf_keras")) for cls in obj.__mro__[1:])


def wrapper_parts(obj: Any) -> tuple[str, Callable[..., Any]] | None:
    """``(decorator name, wrapped function)`` for TF gradient wrappers such as ``tf.recompute_grad``."""
    try:
        decorators, target = _decorator_chain(obj)
    except Exception:  # an object whose attribute access raises is not ours to check
        return None
    names = [getattr(d, "decorator_name", "") for d in decorators]
    for name in ("recompute_grad", "grad_pass_through"):
        if name in names and callable(target):
            return name, target
    return None


def is_tf_own(obj: Any) -> bool:
    """True for TensorFlow's own decorators imported into a user's namespace."""
    module = getattr(obj, "__module__", "") or ""
    return module.startswith(("tensorflow", "keras", "tf_keras"))
