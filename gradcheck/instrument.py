"""Instrumenting a custom-gradient function: what its forward and backward functions received and returned.

:func:`instrument` wraps the user's forward function in ``tf.custom_gradient``
with a backward function that records, into a :class:`BackwardRecord`, how
often TensorFlow called it, with what, and what it gave back, described by
:func:`describe_gradient` without judging it. :class:`Outcome` is one run of
a custom or native gradient. :func:`raised_by_gradcheck` tells the user's
errors from gradcheck's own bugs.
"""

from __future__ import annotations

import inspect
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradcheck import _tf


@dataclass(frozen=True)
class ReturnedGradient:
    """What the backward function returned in one gradient slot."""

    kind: str
    """``tensor``, ``none``, ``indexed_slices``, ``array`` (numpy), ``python`` or ``other``."""
    shape: tuple[int | None, ...] | None
    """Its (static) shape, where it has one."""
    dtype: str | None
    """Its dtype name, where it has one."""
    type_name: str
    """The Python type, for messages."""


@dataclass
class BackwardRecord:
    """What happened inside one custom-gradient call, filled while it runs."""

    function: str = ""
    """Name of the custom-gradient function that was called."""
    received: list[tuple[str, ReturnedGradient]] = field(default_factory=list)
    """The flattened positional arguments its forward pass received, by name."""
    calls: int = 0
    """How many times TensorFlow called the backward function."""
    upstreams: int = 0
    """How many upstream gradients it was handed."""
    returned: list[ReturnedGradient] | None = None
    """The input gradients it returned, flattened as TensorFlow flattens them."""
    variable_returned: list[ReturnedGradient] | None = None
    """The variable gradients it returned, when it was handed ``variables``."""
    variables: list[Any] = field(default_factory=list)
    """The variables TensorFlow handed it."""
    accepts_variables: bool = False
    """Whether its signature takes ``variables``."""
    line: int | None = None
    """Line of the backward function's ``def``."""
    file: str | None = None
    """File of the backward function."""
    phase: str = "start"
    """``forward``, ``forward-done``, ``backward`` or ``backward-done``: how far it got."""
    malformed: str | None = None
    """Set when the forward or backward function broke the calling convention."""


@dataclass
class Outcome:
    """One run of a custom or native gradient."""

    execution: str
    """``eager`` or ``function``."""
    records: list[BackwardRecord] = field(default_factory=list)
    """One record per custom-gradient call (empty for native runs)."""
    grads: dict[str, np.ndarray | None] | None = None
    """Gradient per source (input or variable), densified, as float64; None where TF gave None."""
    error: BaseException | None = None
    """What was raised, if anything."""

    @property
    def ok(self) -> bool:
        """True when the run finished and produced gradients."""
        return self.error is None and self.grads is not None

    @property
    def record(self) -> BackwardRecord:
        """The record of the first custom-gradient call (functions make exactly one)."""
        return self.records[0] if self.records else BackwardRecord()


class ContractError(TypeError):
    """The user's function broke the custom_gradient calling convention (raised on its behalf)."""


def _accepts_variables(grad_fn: Callable[..., Any]) -> bool:
    # Same test as TensorFlow's custom_gradient, so our wrapper is accepted
    # and refused exactly where the user's backward function would be.
    try:
        spec = inspect.getfullargspec(grad_fn)
    except TypeError:
        return False
    return "variables" in spec.args or "variables" in spec.kwonlyargs or spec.varkw is not None


def real_float64(value: Any) -> np.ndarray:
    """A real tensor's values as a float64 array: a differentiable output or a variable, which are never complex
    (:func:`gradcheck._tf.differentiable_outputs` splits a complex output into its two parts)."""
    array = to_float64(value)
    if array is None:
        raise TypeError(f"expected a real tensor, got {type(value).__name__}")
    return array


def to_float64(value: Any) -> np.ndarray | None:
    """A tensor's values as a float64 array (bfloat16 and float16 too); None if it has none (complex included)."""
    tf = _tf.tensorflow()
    try:
        tensor = tf.convert_to_tensor(value)
        if tensor.dtype.is_complex:  # compared through its real and imaginary parts, never as float64
            return None
        if tensor.dtype.is_floating or tensor.dtype.is_integer:
            tensor = tf.cast(tensor, tf.float64)
        # np.asarray reads the tensor's own buffer where .numpy() would copy it (a gradient can be millions
        # of floats); read-only, since writing to it would change the tensor.
        array = np.asarray(tensor, dtype=np.float64)
        array.flags.writeable = False
        return array
    except (TypeError, ValueError, AttributeError):
        return None


def describe_gradient(value: Any, eager: bool) -> ReturnedGradient:
    """Describe one returned gradient (or received argument) without judging it."""
    tf = _tf.tensorflow()
    type_name = type(value).__name__
    if value is None:
        return ReturnedGradient("none", None, None, "None")
    if isinstance(value, tf.IndexedSlices):
        dense_shape = value.dense_shape
        shape: tuple[int | None, ...] | None
        if eager and dense_shape is not None:
            shape = tuple(int(d) for d in np.asarray(dense_shape))
        else:
            static = tf.get_static_value(dense_shape) if dense_shape is not None else None
            shape = tuple(int(d) for d in static) if static is not None else None
        return ReturnedGradient("indexed_slices", shape, value.values.dtype.name, "IndexedSlices")
    if isinstance(value, (tf.Tensor, tf.Variable)) or _tf.is_keras_variable(value):
        shape = tuple(value.shape.as_list()) if value.shape.rank is not None else None
        dtype = value.dtype if isinstance(value.dtype, str) else value.dtype.name
        kind = "variable" if not isinstance(value, tf.Tensor) else "tensor"
        return ReturnedGradient(kind, shape, dtype, type_name)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        return ReturnedGradient("array", tuple(array.shape), array.dtype.name, type_name)
    if isinstance(value, (bool, int, float)):
        kind_dtype = "float" if isinstance(value, float) else type_name
        return ReturnedGradient("python", (), kind_dtype, type_name)
    return ReturnedGradient("other", None, None, type_name)


def _flatten(value: Any) -> list[Any]:
    return _tf.tensorflow().nest.flatten(value)


def _record_returned(record: BackwardRecord, raw: Any, with_variables: bool, eager: bool) -> None:
    if with_variables:
        if not isinstance(raw, (tuple, list)) or len(raw) != 2:
            record.malformed = (
                "the backward function was handed variables= but did not return the pair "
                "(input_gradients, variable_gradients)"
            )
            record.returned = [describe_gradient(v, eager) for v in _flatten(raw)]
            return
        inputs_part, variables_part = raw
        record.returned = [describe_gradient(v, eager) for v in _flatten(inputs_part)]
        record.variable_returned = [describe_gradient(v, eager) for v in _flatten(variables_part)]
    else:
        record.returned = [describe_gradient(v, eager) for v in _flatten(raw)]


def _received(forward: Callable[..., Any], args: tuple[Any, ...], eager: bool) -> list[tuple[str, ReturnedGradient]]:
    """The flattened positional arguments of a call, named after the forward's parameters."""
    try:
        names = [
            p.name
            for p in inspect.signature(forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        names = []
    received = []
    for index, arg in enumerate(args):
        name = names[index] if index < len(names) else f"args[{index}]"
        leaves = _flatten(arg)
        for position, leaf in enumerate(leaves):
            label = name if len(leaves) == 1 else f"{name}[{position}]"
            received.append((label, describe_gradient(leaf, eager=False)))
    return received


def instrument(
    forward: Callable[..., Any], record: BackwardRecord, eager: bool, name: str | None = None
) -> Callable[..., Any]:
    """``forward`` under ``tf.custom_gradient`` with a backward function that reports to ``record``.

    The wrapper keeps the user's backward signature as far as TensorFlow can
    see (taking ``variables`` only where the user's does), so TensorFlow
    refuses or accepts it exactly as it would the user's own.
    """
    tf = _tf.tensorflow()
    record.function = name or str(getattr(forward, "__name__", "custom_gradient_function"))

    def instrumented(*args: Any, **kwargs: Any) -> Any:
        record.phase = "forward"
        record.received = _received(forward, args, eager)
        returned = forward(*args, **kwargs)
        record.phase = "forward-done"
        if not isinstance(returned, (tuple, list)) or len(returned) != 2 or not callable(returned[1]):
            record.malformed = (
                f"the forward function must return (result, grad_fn); it returned {type(returned).__name__}"
            )
            raise ContractError(record.malformed)
        result, grad_fn = returned
        record.accepts_variables = _accepts_variables(grad_fn)
        code = getattr(grad_fn, "__code__", None)
        if code is not None:
            record.line = code.co_firstlineno
            record.file = code.co_filename

        def call(upstreams: tuple[Any, ...], variables: Any) -> Any:
            record.calls += 1
            record.upstreams = len(upstreams)
            record.phase = "backward"
            if variables is None:
                raw = grad_fn(*upstreams)
            else:
                record.variables = list(variables)
                raw = grad_fn(*upstreams, variables=variables)
            record.phase = "backward-done"
            try:
                _record_returned(record, raw, variables is not None, eager)
            except Exception as error:  # describing must never break the user's backward pass
                record.malformed = f"could not read what the backward function returned: {error}"
            return raw

        recording_grad_fn: Callable[..., Any]
        if record.accepts_variables:

            def recording_grad_fn(*upstreams: Any, variables: Any = None) -> Any:
                return call(upstreams, variables)
        else:

            def recording_grad_fn(*upstreams: Any) -> Any:
                return call(upstreams, None)

        return result, recording_grad_fn

    instrumented.__name__ = record.function
    return tf.custom_gradient(instrumented)


def forward_result(returned: Any) -> Any:
    """The result half of what an undecorated custom-gradient forward returned: ``(result, grad_fn)``."""
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        raise ContractError(
            f"the forward function must return (result, grad_fn); it returned {type(returned).__name__}"
        )
    return returned[0]


def call_instrumented(
    forward: Callable[..., Any],
    name: str,
    records: list[BackwardRecord],
    eager: bool,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
) -> Any:
    """Call ``forward`` through :func:`instrument`, appending the record of this call to ``records``."""
    record = BackwardRecord()
    records.append(record)
    return instrument(forward, record, eager, name)(*args, **kwargs)


#: Exception types that, raised in gradcheck's own frames, are bugs of ours. TensorFlow raises
#: ValueError and TypeError on the user's behalf, and with traceback filtering its frames can
#: vanish from tracebacks, so those two never count.
_BUG_TYPES = (AttributeError, NameError, KeyError, IndexError, AssertionError, ImportError)


def raised_by_gradcheck(error: BaseException) -> bool:
    """True when ``error`` is a bug in gradcheck itself, not the user's code or TensorFlow's.

    Everything the checker catches from a run is the user's doing unless
    the innermost frame is gradcheck's own and gradcheck did not raise it on
    the user's behalf (:class:`ContractError`). Such errors must surface as
    internal errors (exit 3), never as a verdict on the user's function.
    """
    if isinstance(error, ContractError) or not isinstance(error, _BUG_TYPES):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return False
    package = str(Path(__file__).resolve().parent)
    return str(Path(frames[-1].filename).resolve()).startswith(package + os.sep)
