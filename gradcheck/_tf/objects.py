"""Reading TensorFlow and Keras objects: custom-gradient parts, decorators, structures, variables, devices.

The private attributes we rely on (``_tf_decorator``, ``tf_decorator.unwrap``) are read here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gradcheck._tf.loading import tensorflow


def gpu_available() -> bool:
    """True when TensorFlow sees at least one GPU."""
    return bool(tensorflow().config.list_physical_devices("GPU"))


def device_name(device: str) -> str:
    """The TensorFlow device a ``--device`` value stands for: ``auto`` is the GPU where there is one."""
    if device == "auto":
        device = "gpu" if gpu_available() else "cpu"
    return "/GPU:0" if device == "gpu" else "/CPU:0"


@dataclass(frozen=True)
class CustomGradientParts:
    """What a custom-gradient object is made of."""

    forward: Callable[..., Any]
    """The undecorated function: returns ``(result, grad_fn)``."""
    decorators: tuple[str, ...]
    """Decorator names from the outside in, e.g. ``('tf.function', 'custom_gradient')``."""
    input_signature: tuple[Any, ...] | None
    """The ``input_signature`` of an enclosing ``tf.function``, if any."""


def attribute(obj: Any, name: str, default: Any = None) -> Any:
    """``getattr(obj, name, default)`` for any object a user's module holds, without its side effects.

    A module's attributes are read from its ``__dict__`` alone: asking a
    ``LazyLoader`` (TensorFlow's, TFP's) or a module-level ``__getattr__``
    for anything else imports what it stands for, and an optional dependency
    that is not installed then raises ``ModuleNotFoundError``. Any other
    object's ``__getattr__`` or property may raise anything: that object just
    does not have the attribute.
    """
    if isinstance(obj, ModuleType):
        return vars(obj).get(name, default)
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


MISSING = object()


def has_attribute(obj: Any, name: str) -> bool:
    """``hasattr`` with the guarantees of :func:`attribute`."""
    return attribute(obj, name, MISSING) is not MISSING


def _decorator_chain(obj: Any) -> tuple[list[Any], Any]:
    """``tf_decorator.unwrap`` without importing TensorFlow for plain objects."""
    if attribute(obj, "_tf_decorator") is None:
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


def differentiable_outputs(structure: Any) -> list[tuple[str, Any]]:
    """The real-valued parts of a forward pass's result, each with its path, in upstream order.

    A float tensor is itself; a complex tensor is its real and imaginary
    parts (paths ``PATH.real``, ``PATH.imag``). Checking the parts with real
    upstreams ``a`` and ``b`` is checking the complex output under
    TensorFlow's convention: the backward function receives ``dy = a + ib``
    (``dL/dRe y + i dL/dIm y``), and finite differences of the real loss
    ``<a, Re y> + <b, Im y>`` are the reference.
    """
    tf = tensorflow()
    parts: list[tuple[str, Any]] = []
    for index, (path, value) in enumerate(flatten_with_paths(structure)):
        if not isinstance(value, (tf.Tensor, tf.Variable)):
            continue
        label = path or str(index)
        if value.dtype.is_floating:
            parts.append((label, value))
        elif value.dtype.is_complex:
            parts.append((label + ".real", tf.math.real(value)))
            parts.append((label + ".imag", tf.math.imag(value)))
    return parts


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
    module = attribute(obj, "__module__", "") or ""
    return isinstance(module, str) and is_tf_module(module)


def is_tf_module(name: str) -> bool:
    """True for the name of one of TensorFlow's or Keras's own modules."""
    return name.startswith(("tensorflow", "keras", "tf_keras"))


#: TensorFlow shares the memory of a numpy array aligned to this many bytes instead of copying it.
def adopt(array: Any, dtype: str) -> Any:
    """A tensor of ``dtype`` over a numpy array the caller built for it and no longer touches.

    ``tf.constant`` copies every numpy array first, in case the caller changes
    it later, and TensorFlow copies again unless the array is 64-byte aligned
    (:func:`gradcheck.arrays.aligned_empty`); for a stack of perturbed inputs each copy is a
    pass over tens of MB per forward call. Arrays of another dtype are
    converted (and so copied) as ``tf.constant`` would.
    """
    import numpy as np

    tf = tensorflow()
    target = tf.as_dtype(dtype)
    if not isinstance(array, np.ndarray) or array.dtype != target.as_numpy_dtype or not array.flags.c_contiguous:
        return tf.constant(array, dtype=target)
    try:  # what tf.constant does after its copy; internals, so any change in them falls back to it
        from tensorflow.python.eager import context
        from tensorflow.python.framework import ops

        ctx = context.context()
        ctx.ensure_initialized()
        return ops.EagerTensor(array, ctx.device_name, target.as_datatype_enum)
    except (ImportError, AttributeError, TypeError):
        return tf.constant(array, dtype=target)


def forward_name(wrapped: Any) -> str:
    """The user's name for the forward function a custom gradient wraps (TFP: its ``vjp_fwd``); for one a
    factory made (``_squared_dist = custom_gradient(...)(func)``), the name its module binds it to."""
    user = closure_function(wrapped, ("vjp_fwd",))
    target = user if user is not None else wrapped
    name = getattr(getattr(target, "__func__", target), "__name__", "custom_gradient_function")
    namespace = getattr(wrapped, "__globals__", None) or {}
    if isinstance(name, str) and _bound_forward(namespace.get(name)) is wrapped:
        return name
    bound = (key for key, value in list(namespace.items()) if _bound_forward(value) is wrapped)
    return next(bound, name)


def _bound_forward(value: Any) -> Any:
    """The forward function of a custom-gradient object, else None."""
    if value is None or attribute(value, "_tf_decorator") is None:
        return None
    parts = custom_gradient_parts(value)
    return parts.forward if parts is not None else None


def closure_function(func: Any, names: tuple[str, ...]) -> Any:
    """The first function held in ``func``'s closure under one of ``names`` (TFP's helper keeps
    the user's ``vjp_fwd`` and ``vjp_bwd`` there), or None."""
    func = getattr(func, "__func__", func)
    code, cells = getattr(func, "__code__", None), getattr(func, "__closure__", None)
    if code is None or not cells:
        return None
    for name, cell in zip(code.co_freevars, cells):
        if name in names:
            with contextlib.suppress(ValueError):  # an empty cell
                value = cell.cell_contents
                if callable(value) and hasattr(value, "__code__"):
                    return value
    return None
