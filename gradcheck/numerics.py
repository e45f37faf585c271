"""Custom, native and finite-difference products of one function: computes, never judges.

:class:`Harness` runs a custom-gradient function the three ways gradcheck
needs: through ``tf.custom_gradient`` with an instrumented backward function
(to see exactly what it returned, and whether TensorFlow called it at all),
natively (the undecorated forward under a ``GradientTape``), and forward only
for finite differences. The finite-difference helpers below take a plain
``loss`` callable and return estimates with their own error bounds; judging
them is :mod:`gradcheck.compare`'s job.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradcheck import _tf
from gradcheck.inputs import CallPlan

#: Machine epsilon by dtype name, without asking TensorFlow.
EPSILON = {
    "float64": float(np.finfo(np.float64).eps),
    "float32": float(np.finfo(np.float32).eps),
    "float16": float(np.finfo(np.float16).eps),
    "bfloat16": 2.0**-7,
}


def default_step(dtype: str) -> float:
    """Relative finite-difference step: cbrt(machine epsilon), the optimum for central differences."""
    return EPSILON[dtype] ** (1.0 / 3.0)


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
    value: np.ndarray | None = field(default=None, compare=False)
    """Its value, when it was returned eagerly and is dense or densifiable."""


@dataclass
class BackwardRecord:
    """What happened inside one custom-gradient call, filled while it runs."""

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
    tape_none: list[bool] = field(default_factory=list)
    """Per differentiated input: True where the tape gave no gradient (graph runs)."""


@dataclass
class Outcome:
    """One run of a custom or native gradient."""

    execution: str
    """``eager`` or ``function``."""
    record: BackwardRecord
    """What the backward function did (empty for native runs)."""
    grads: dict[str, np.ndarray | None] | None = None
    """Gradient per differentiated input, densified, as float64; None where TF gave None."""
    error: BaseException | None = None
    """What was raised, if anything."""

    @property
    def ok(self) -> bool:
        """True when the run finished and produced gradients."""
        return self.error is None and self.grads is not None


@dataclass(frozen=True)
class OutputSpec:
    """One float output of the forward pass, which gets a random upstream."""

    shape: tuple[int, ...]
    dtype: str


def _accepts_variables(grad_fn: Callable[..., Any]) -> bool:
    # Same test as TensorFlow's custom_gradient, so our wrapper is accepted
    # and refused exactly where the user's backward function would be.
    try:
        spec = inspect.getfullargspec(grad_fn)
    except TypeError:
        return False
    return "variables" in spec.args or "variables" in spec.kwonlyargs or spec.varkw is not None


def describe_gradient(value: Any, eager: bool) -> ReturnedGradient:
    """Describe one returned gradient without judging it."""
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
        dense = np.asarray(tf.convert_to_tensor(value)) if eager else None
        return ReturnedGradient("indexed_slices", shape, value.values.dtype.name, "IndexedSlices", dense)
    if isinstance(value, (tf.Tensor, tf.Variable)):
        shape = tuple(value.shape.as_list()) if value.shape.rank is not None else None
        dense = np.asarray(value) if eager and hasattr(value, "numpy") else None
        return ReturnedGradient("tensor", shape, value.dtype.name, type_name, dense)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        return ReturnedGradient("array", tuple(array.shape), array.dtype.name, type_name, array)
    if isinstance(value, (bool, int, float)):
        kind_dtype = "float" if isinstance(value, float) else type_name
        return ReturnedGradient("python", (), kind_dtype, type_name, np.asarray(value))
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


def instrument(forward: Callable[..., Any], record: BackwardRecord, eager: bool) -> Callable[..., Any]:
    """``forward`` under ``tf.custom_gradient`` with a backward function that reports to ``record``.

    The wrapper keeps the user's backward signature as far as TensorFlow can
    see (taking ``variables`` only where the user's does), so TensorFlow
    refuses or accepts it exactly as it would the user's own.
    """
    tf = _tf.tensorflow()

    def instrumented(*args: Any, **kwargs: Any) -> Any:
        record.phase = "forward"
        returned = forward(*args, **kwargs)
        record.phase = "forward-done"
        if not isinstance(returned, (tuple, list)) or len(returned) != 2 or not callable(returned[1]):
            record.malformed = (
                f"the forward function must return (result, grad_fn); it returned {type(returned).__name__}"
            )
            raise TypeError(record.malformed)
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
            _record_returned(record, raw, variables is not None, eager)
            return raw

        if record.accepts_variables:

            def recording_grad_fn(*upstreams: Any, variables: Any = None) -> Any:
                return call(upstreams, variables)
        else:

            def recording_grad_fn(*upstreams: Any) -> Any:
                return call(upstreams, None)

        return result, recording_grad_fn

    instrumented.__name__ = getattr(forward, "__name__", "custom_gradient_function")
    return tf.custom_gradient(instrumented)


class Harness:
    """Runs one custom-gradient function with one call plan.

    ``values`` everywhere is a dict from argument name to a float64 (or
    integer) numpy array for tensors, or the constant itself.
    """

    def __init__(self, forward: Callable[..., Any], plan: CallPlan) -> None:
        self.forward = forward
        self.plan = plan
        self._graph_vjp: Any = None
        self._graph_record: BackwardRecord | None = None
        self._graph_native: Any = None
        self.output_specs: list[OutputSpec] | None = None
        #: How many times the forward ran (counts for benchmarks and tests).
        self.forward_evaluations = 0

    # -- calling ---------------------------------------------------------------

    def _closed_forward(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        """``forward`` with the plan's bound constants filled in at their positions."""
        bound = self.plan.bound_constants
        if not bound:
            return forward
        order = [a for a in self.plan.arguments if not a.keyword]

        def closed(*passed: Any, **kwargs: Any) -> Any:
            supplied = iter(passed)
            args = [a.value if a.name in bound else next(supplied) for a in order]
            return forward(*args, **kwargs)

        closed.__name__ = getattr(forward, "__name__", "forward")
        return closed

    def tensors(self, values: dict[str, Any]) -> dict[str, Any]:
        """TF tensors for the tensor arguments, in their dtypes; constants as they are."""
        tf = _tf.tensorflow()
        converted = {}
        for argument in self.plan.arguments:
            value = values[argument.name]
            if argument.spec is not None:
                value = tf.constant(np.asarray(value), dtype=argument.spec.dtype)
            converted[argument.name] = value
        return converted

    def _call(self, fn: Callable[..., Any], tensors: dict[str, Any], closed: bool) -> Any:
        arguments = self.plan.positional if closed else [a for a in self.plan.arguments if not a.keyword]
        args = [tensors[a.name] for a in arguments]
        kwargs = {a.name: tensors[a.name] for a in self.plan.arguments if a.keyword}
        return fn(*args, **kwargs)

    def _sources(self, tensors: dict[str, Any]) -> list[Any]:
        return [tensors[a.name] for a in self.plan.differentiable]

    def _float_outputs(self, result: Any) -> list[Any]:
        tf = _tf.tensorflow()
        flat = tf.nest.flatten(result)
        return [t for t in flat if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating]

    def _densify(self, grads: list[Any], sources: list[Any]) -> dict[str, np.ndarray | None]:
        tf = _tf.tensorflow()
        dense: dict[str, np.ndarray | None] = {}
        for argument, grad in zip(self.plan.differentiable, grads):
            if grad is None:
                dense[argument.name] = None
                continue
            if isinstance(grad, tf.IndexedSlices):
                grad = tf.convert_to_tensor(grad)
            dense[argument.name] = np.asarray(grad, dtype=np.float64)
        return dense

    # -- forward ---------------------------------------------------------------

    def outputs(self, values: dict[str, Any]) -> list[np.ndarray]:
        """The float outputs of the undecorated forward pass, eagerly, as float64."""
        self.forward_evaluations += 1
        returned = self._call(self.forward, self.tensors(values), closed=False)
        if not isinstance(returned, (tuple, list)) or len(returned) != 2:
            raise TypeError(
                f"the forward function must return (result, grad_fn); it returned {type(returned).__name__}"
            )
        flat = self._float_outputs(returned[0])
        if self.output_specs is None:
            self.output_specs = [OutputSpec(tuple(t.shape.as_list()), t.dtype.name) for t in flat]
        return [np.asarray(t, dtype=np.float64) for t in flat]

    def loss(self, values: dict[str, Any], upstreams: list[np.ndarray]) -> tuple[float, float]:
        """``sum_i <upstream_i, output_i>`` and ``sum_i |upstream_i * output_i|`` (its rounding scale)."""
        outputs = self.outputs(values)
        total = 0.0
        scale = 0.0
        for upstream, output in zip(upstreams, outputs):
            products = upstream * output
            total += float(np.sum(products))
            scale += float(np.sum(np.abs(products)))
        return total, scale

    # -- gradients -------------------------------------------------------------

    def _upstream_tensors(self, upstreams: list[np.ndarray]) -> list[Any]:
        tf = _tf.tensorflow()
        specs = self.output_specs or []
        return [tf.constant(u, dtype=s.dtype) for u, s in zip(upstreams, specs)]

    def custom(self, values: dict[str, Any], upstreams: list[np.ndarray], execution: str) -> Outcome:
        """The custom vector-Jacobian product, through TensorFlow's own custom_gradient."""
        if execution == "function":
            return self._custom_function(values, upstreams)
        tf = _tf.tensorflow()
        record = BackwardRecord()
        fn = instrument(self._closed_forward(self.forward), record, eager=True)
        tensors = self.tensors(values)
        sources = self._sources(tensors)
        try:
            with tf.GradientTape() as tape:
                for source in sources:
                    tape.watch(source)
                result = self._call(fn, tensors, closed=True)
            targets = self._float_outputs(result)
            grads = tape.gradient(targets, sources, output_gradients=self._upstream_tensors(upstreams))
        except Exception as error:  # the user's code (or TF on its behalf) raised
            return Outcome("eager", record, error=error)
        return Outcome("eager", record, grads=self._densify(grads, sources))

    def _custom_function(self, values: dict[str, Any], upstreams: list[np.ndarray]) -> Outcome:
        tf = _tf.tensorflow()
        if self._graph_vjp is None:
            record = BackwardRecord()
            fn = instrument(self._closed_forward(self.forward), record, eager=False)
            names = [a.name for a in self.plan.arguments if a.spec is not None]
            constants = {a.name: a.value for a in self.plan.arguments if a.spec is None}

            def vjp(tensor_list: list[Any], upstream_list: list[Any]) -> list[Any]:
                tensors = dict(zip(names, tensor_list))
                tensors.update(constants)
                sources = self._sources(tensors)
                with tf.GradientTape() as tape:
                    for source in sources:
                        tape.watch(source)
                    result = self._call(fn, tensors, closed=True)
                targets = self._float_outputs(result)
                grads = tape.gradient(targets, sources, output_gradients=upstream_list)
                record.tape_none = [g is None for g in grads]
                return [tf.zeros_like(s) if g is None else tf.convert_to_tensor(g) for g, s in zip(grads, sources)]

            self._graph_vjp = tf.function(vjp, autograph=False)
            self._graph_record = record
            self._graph_names = names
        record = self._graph_record
        assert record is not None
        tensors = self.tensors(values)
        try:
            grads = self._graph_vjp([tensors[n] for n in self._graph_names], self._upstream_tensors(upstreams))
        except Exception as error:  # the user's code raised while tracing or running
            return Outcome("function", record, error=error)
        nones = record.tape_none or [False] * len(grads)
        dense = self._densify(list(grads), [])
        for argument, is_none in zip(self.plan.differentiable, nones):
            if is_none:
                dense[argument.name] = None
        return Outcome("function", record, grads=dense)

    def native(self, values: dict[str, Any], upstreams: list[np.ndarray], execution: str = "eager") -> Outcome:
        """Native autodiff of the same forward pass: the backward function is never called."""
        tf = _tf.tensorflow()
        record = BackwardRecord()

        def run(tensors: dict[str, Any], upstream_list: list[Any]) -> list[Any]:
            sources = self._sources(tensors)
            with tf.GradientTape() as tape:
                for source in sources:
                    tape.watch(source)
                returned = self._call(self.forward, tensors, closed=False)
            targets = self._float_outputs(returned[0])
            return tape.gradient(targets, sources, output_gradients=upstream_list)

        tensors = self.tensors(values)
        try:
            if execution == "function":
                if self._graph_native is None:
                    names = [a.name for a in self.plan.arguments if a.spec is not None]
                    constants = {a.name: a.value for a in self.plan.arguments if a.spec is None}

                    def graph_run(tensor_list: list[Any], upstream_list: list[Any]) -> list[Any]:
                        inner = dict(zip(names, tensor_list))
                        inner.update(constants)
                        grads = run(inner, upstream_list)
                        return [g if g is None else tf.convert_to_tensor(g) for g in grads]

                    self._graph_native = (tf.function(graph_run, autograph=False), names)
                function, names = self._graph_native
                grads = function([tensors[n] for n in names], self._upstream_tensors(upstreams))
            else:
                grads = run(tensors, self._upstream_tensors(upstreams))
        except Exception as error:  # the user's forward raised
            return Outcome(execution, record, error=error)
        return Outcome(execution, record, grads=self._densify(list(grads), []))


# -- finite differences -----------------------------------------------------------

Loss = Callable[[dict[str, Any]], tuple[float, float]]


@dataclass(frozen=True)
class DirectionalEstimate:
    """A finite-difference estimate of ``<gradient, direction>``."""

    value: float
    """Richardson-extrapolated central difference."""
    error: float
    """A bound on its own error: step-halving difference plus rounding."""
    evaluations: int
    """Forward evaluations it took."""


def _perturbed(values: dict[str, Any], name: str, delta: np.ndarray) -> dict[str, Any]:
    moved = dict(values)
    moved[name] = values[name] + delta
    return moved


def directional_derivative(
    loss: Loss, values: dict[str, Any], name: str, direction: np.ndarray, step: float, dtype: str
) -> DirectionalEstimate:
    """Central differences along ``direction`` at steps ``h`` and ``2h``, Richardson-combined.

    The error bound has three parts: the difference between the two step
    sizes (truncation), ``eps * scale / h`` (rounding of the loss itself),
    and a kink detector. A kink inside both steps fools the first part,
    since both central differences then see the same ramp; but it makes the
    one-sided differences disagree by the jump in slope whatever the step,
    while for a smooth function their disagreement shrinks linearly with the
    step. ``2 * A(h) - A(2h)``, with ``A(h) = (L(h) - 2 L(0) + L(-h)) / h``,
    is O(h^3) for smooth functions and the size of the jump at a kink.
    """
    center, scale = loss(values)
    plus1, _ = loss(_perturbed(values, name, step * direction))
    minus1, _ = loss(_perturbed(values, name, -step * direction))
    plus2, _ = loss(_perturbed(values, name, 2 * step * direction))
    minus2, _ = loss(_perturbed(values, name, -2 * step * direction))
    near = (plus1 - minus1) / (2 * step)
    far = (plus2 - minus2) / (4 * step)
    estimate = near + (near - far) / 3.0
    asymmetry_near = (plus1 - 2 * center + minus1) / step
    asymmetry_far = (plus2 - 2 * center + minus2) / (2 * step)
    kink = abs(2 * asymmetry_near - asymmetry_far)
    rounding = 16.0 * EPSILON[dtype] * scale / step
    error = abs(near - far) + kink + rounding
    if not (math.isfinite(estimate) and math.isfinite(error)):
        return DirectionalEstimate(float("nan"), float("inf"), 5)
    return DirectionalEstimate(estimate, error, 5)


def element_directions(shape: tuple[int, ...], symmetric: bool) -> list[tuple[tuple[int, ...], ...]]:
    """The element groups perturbed together in a full finite-difference gradient.

    One element at a time; for symmetric (spd) inputs, the pair (i, j) and
    (j, i) together, since only symmetric perturbations stay in the domain
    and a Cholesky-based forward reads only one triangle.
    """
    groups: list[tuple[tuple[int, ...], ...]] = []
    for index in np.ndindex(*shape):
        if symmetric and len(index) >= 2:
            i, j = index[-2], index[-1]
            if i > j:
                continue
            if i != j:
                mirror = index[:-2] + (j, i)
                groups.append((index, mirror))
                continue
        groups.append((index,))
    return groups


def finite_difference_gradient(
    loss: Loss,
    values: dict[str, Any],
    name: str,
    scale: np.ndarray,
    step: float,
    dtype: str,
    symmetric: bool,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The whole gradient by central differences, with a per-element error bound.

    For symmetric inputs each off-diagonal pair is perturbed by half a step
    each, so the estimate is the symmetric part of the gradient.
    """
    base = np.asarray(values[name], dtype=np.float64)
    gradient = np.zeros(base.shape)
    error = np.zeros(base.shape)
    evaluations = 0
    for group in element_directions(base.shape, symmetric):
        direction = np.zeros(base.shape)
        weight = 0.5 if len(group) == 2 else 1.0
        for index in group:
            direction[index] = weight * scale[index]
        estimate = directional_derivative(loss, values, name, direction, step, dtype)
        evaluations += estimate.evaluations
        # d/dt L(x + t * direction) = sum_g weight * scale * grad[g]; for a symmetric
        # pair both gradient entries share the value, so divide by the scale once.
        value = estimate.value / scale[group[0]]
        bound = estimate.error / scale[group[0]]
        for index in group:
            gradient[index] = value
            error[index] = bound
    return gradient, error, evaluations
