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

import contextlib
import functools
import inspect
import math
import os
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
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


def to_float64(value: Any) -> np.ndarray | None:
    """A tensor's values as a float64 array (bfloat16 and float16 too); None if it has none."""
    tf = _tf.tensorflow()
    try:
        tensor = tf.convert_to_tensor(value)
        if tensor.dtype.is_floating or tensor.dtype.is_integer:
            tensor = tf.cast(tensor, tf.float64)
        return np.asarray(tensor.numpy(), dtype=np.float64)
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
        dense = to_float64(tf.convert_to_tensor(value)) if eager else None
        return ReturnedGradient("indexed_slices", shape, value.values.dtype.name, "IndexedSlices", dense)
    if isinstance(value, (tf.Tensor, tf.Variable)) or _tf.is_keras_variable(value):
        shape = tuple(value.shape.as_list()) if value.shape.rank is not None else None
        dtype = value.dtype if isinstance(value.dtype, str) else value.dtype.name
        kind = "variable" if not isinstance(value, tf.Tensor) else "tensor"
        dense = to_float64(value) if eager and kind == "tensor" and hasattr(value, "numpy") else None
        return ReturnedGradient(kind, shape, dtype, type_name, dense)
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
    record.function = name or getattr(forward, "__name__", "custom_gradient_function")

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

        if record.accepts_variables:

            def recording_grad_fn(*upstreams: Any, variables: Any = None) -> Any:
                return call(upstreams, variables)
        else:

            def recording_grad_fn(*upstreams: Any) -> Any:
                return call(upstreams, None)

        return result, recording_grad_fn

    instrumented.__name__ = record.function
    return tf.custom_gradient(instrumented)


class ContractError(TypeError):
    """The user's function broke the custom_gradient calling convention (raised on its behalf)."""


def _result_of(returned: Any) -> Any:
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        raise ContractError(
            f"the forward function must return (result, grad_fn); it returned {type(returned).__name__}"
        )
    return returned[0]


class FunctionTarget:
    """A custom-gradient function called directly."""

    def __init__(self, forward: Callable[..., Any], name: str | None = None) -> None:
        self.forward = forward
        self.name = name or getattr(forward, "__name__", "function")

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call through ``tf.custom_gradient`` with an instrumented backward function."""
        record = BackwardRecord()
        records.append(record)
        return instrument(self.forward, record, eager, self.name)(*args, **kwargs)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the undecorated function and keep its result: autodiff sees every op."""
        return _result_of(self.forward(*args, **kwargs))


class WrapperTarget:
    """A function behind a TensorFlow gradient wrapper such as ``tf.recompute_grad``.

    The custom gradient is TensorFlow's own backward function, so there is
    nothing to instrument: the check compares the wrapper with autodiff of
    the function it wraps.
    """

    def __init__(self, wrapped: Callable[..., Any], target: Callable[..., Any]) -> None:
        self.wrapped = wrapped
        self.target = target

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call the wrapper as the user's code does."""
        return self.wrapped(*args, **kwargs)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the function it wraps."""
        return self.target(*args, **kwargs)


@dataclass(frozen=True)
class Patch:
    """A name in some namespace that holds a custom-gradient function a layer calls."""

    namespace: dict[str, Any]
    """The module (or object) ``__dict__`` the layer's code looks the name up in."""
    name: str
    """The name."""
    original: Any
    """The user's custom-gradient object."""
    forward: Callable[..., Any]
    """Its undecorated function."""


class LayerTarget:
    """A Keras layer whose ``call`` reaches custom-gradient functions.

    For the duration of one call, each custom-gradient function the layer
    reaches is replaced in its namespace: by an instrumented copy for the
    custom run, by its undecorated form for the native one. The user's
    objects are put back before the call returns.
    """

    def __init__(self, layer: Any, patches: list[Patch]) -> None:
        self.layer = layer
        self.patches = patches

    @contextlib.contextmanager
    def _patched(self, replacements: list[Callable[..., Any]]) -> Iterator[None]:
        try:
            for patch, replacement in zip(self.patches, replacements):
                patch.namespace[patch.name] = replacement
            yield
        finally:
            for patch in self.patches:
                patch.namespace[patch.name] = patch.original

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call the layer with every custom-gradient function it reaches instrumented."""

        def instrumented(patch: Patch) -> Callable[..., Any]:
            def call(*a: Any, **k: Any) -> Any:
                record = BackwardRecord()
                records.append(record)
                return instrument(patch.forward, record, eager, patch.name)(*a, **k)

            return call

        with self._patched([instrumented(p) for p in self.patches]):
            return self.layer(*args, **kwargs)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the layer with every custom-gradient function it reaches undecorated."""

        def undecorated(patch: Patch) -> Callable[..., Any]:
            def call(*a: Any, **k: Any) -> Any:
                return _result_of(patch.forward(*a, **k))

            return call

        with self._patched([undecorated(p) for p in self.patches]):
            return self.layer(*args, **kwargs)


@dataclass(frozen=True)
class Source:
    """Something a gradient is taken with respect to: an input tensor or a variable."""

    name: str
    """The input's argument name, or the variable's name."""
    shape: tuple[int, ...]
    dtype: str
    kind: str = "input"
    """``input`` or ``variable``."""
    symmetric: bool = False
    """Only symmetric perturbations are meaningful (spd inputs)."""

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))


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


class Harness:
    """Runs one call target with one call plan: forward, custom and native gradients, losses.

    ``values`` everywhere is a dict from a leaf argument's or a variable's
    name to a float64 (or integer) numpy array, or the constant itself.
    Variables are set from ``values`` before each call, and :meth:`restore`
    puts the user's values back.
    """

    def __init__(self, target: Any, plan: CallPlan, name_variable: Callable[[Any], str] | None = None) -> None:
        self.target = target
        self.plan = plan
        self._name_variable = name_variable or _default_variable_name
        self.variables: list[tuple[str, Any]] = []
        self._originals: dict[str, np.ndarray] = {}
        self._assigned: dict[str, Any] = {}
        self._graph_vjp: Any = None
        self._graph_records: list[BackwardRecord] = []
        self._graph_native: Any = None
        self.output_specs: list[OutputSpec] | None = None
        #: Per input: how its finite differences are batched (``stack``, ``vectorized``, ``loop``) and why.
        self.batching: dict[str, tuple[str, str]] = {}
        self._vectorized: dict[str, tuple[Any, list[str]]] = {}
        #: Where each float output sits in the result (a dict key, a tuple index), in upstream order.
        self.output_labels: list[str] = []
        #: How many times the forward ran for finite differences and probing.
        self.forward_evaluations = 0

    # -- sources and values ----------------------------------------------------

    @property
    def sources(self) -> list[Source]:
        """Inputs then variables: everything a gradient is checked for."""
        found = [
            Source(a.name, a.spec.shape, a.spec.dtype, "input", a.spec.symmetric)  # type: ignore[union-attr]
            for a in self.plan.differentiable
        ]
        found.extend(
            Source(name, tuple(variable.shape.as_list()), variable.dtype.name, "variable")
            for name, variable in self.variables
        )
        return found

    def variable_values(self) -> dict[str, np.ndarray]:
        """The current value of every variable the forward pass reads."""
        return {name: to_float64(variable) for name, variable in self.variables}

    def _apply(self, values: dict[str, Any]) -> dict[str, Any]:
        """TF tensors for the tensor leaves; variables assigned from ``values``."""
        tf = _tf.tensorflow()
        tensors: dict[str, Any] = {}
        for leaf in self.plan.leaves:
            value = values[leaf.name]
            if leaf.spec is not None:
                value = tf.constant(np.asarray(value), dtype=leaf.spec.dtype)
            tensors[leaf.name] = value
        for name, variable in self.variables:
            value = values.get(name)
            # Keep the array itself, not its id: ids of freed arrays are reused.
            if value is not None and self._assigned.get(name) is not value:
                variable.assign(np.asarray(value, dtype=variable.dtype.as_numpy_dtype))
                self._assigned[name] = value
        return tensors

    def restore(self) -> None:
        """Put every variable back to the value it had before the check."""
        for name, variable in self.variables:
            if name in self._originals:
                variable.assign(self._originals[name].astype(variable.dtype.as_numpy_dtype))
        self._assigned.clear()

    def _arguments(self, tensors: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return self.plan.build(lambda leaf: tensors[leaf.name])

    def _float_outputs(self, result: Any) -> list[Any]:
        tf = _tf.tensorflow()
        flat = tf.nest.flatten(result)
        return [t for t in flat if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating]

    def _source_tensors(self, tensors: dict[str, Any]) -> list[Any]:
        return [tensors[a.name] for a in self.plan.differentiable] + [v for _, v in self.variables]

    def _densify(self, grads: list[Any]) -> dict[str, np.ndarray | None]:
        tf = _tf.tensorflow()
        dense: dict[str, np.ndarray | None] = {}
        for source, grad in zip(self.sources, grads):
            if grad is None:
                dense[source.name] = None
                continue
            if isinstance(grad, tf.IndexedSlices):
                grad = tf.convert_to_tensor(grad)
            dense[source.name] = to_float64(grad)
        return dense

    # -- forward ---------------------------------------------------------------

    def outputs(self, values: dict[str, Any]) -> list[np.ndarray]:
        """The float outputs of the forward pass (native path), eagerly, as float64.

        The first call also finds the variables the forward pass reads.
        """
        tf = _tf.tensorflow()
        self.forward_evaluations += 1
        tensors = self._apply(values)
        args, kwargs = self._arguments(tensors)
        if self.output_specs is None:
            with tf.GradientTape(watch_accessed_variables=True) as tape:
                result = self.target.native(args, kwargs)
            self._discover_variables(tape.watched_variables())
        else:
            result = self.target.native(args, kwargs)
        flat = self._float_outputs(result)
        if self.output_specs is None:
            self.output_specs = [OutputSpec(tuple(t.shape.as_list()), t.dtype.name) for t in flat]
            self.output_labels = [
                path or str(index)
                for index, (path, t) in enumerate(_tf.flatten_with_paths(result))
                if any(t is f for f in flat)
            ]
        return [to_float64(t) for t in flat]

    def _discover_variables(self, watched: Any) -> None:
        named: list[tuple[str, Any]] = []
        used: set[str] = set()
        for variable in watched:
            name = self._name_variable(variable)
            while name in used:
                name += "_"
            used.add(name)
            named.append((name, variable))
        self.variables = named
        self._originals = {name: np.asarray(v.numpy()).copy() for name, v in named}

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

    def _vjp(
        self, call: Callable[[list[Any], dict[str, Any]], Any], tensors: dict[str, Any], upstream_list: list[Any]
    ) -> list[Any]:
        tf = _tf.tensorflow()
        sources = self._source_tensors(tensors)
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            for source in sources:
                tape.watch(source)
            args, kwargs = self._arguments(tensors)
            result = call(args, kwargs)
        targets = self._float_outputs(result)
        return tape.gradient(targets, sources, output_gradients=upstream_list)

    def custom(self, values: dict[str, Any], upstreams: list[np.ndarray], execution: str) -> Outcome:
        """The custom vector-Jacobian product, through TensorFlow's own custom_gradient."""
        if execution == "function":
            return self._custom_function(values, upstreams)
        records: list[BackwardRecord] = []
        try:
            tensors = self._apply(values)
            grads = self._vjp(
                lambda a, k: self.target.custom(a, k, records, True), tensors, self._upstream_tensors(upstreams)
            )
        except Exception as error:  # the user's code (or TF on its behalf) raised
            if raised_by_gradcheck(error):
                raise
            return Outcome("eager", records, error=error)
        return Outcome("eager", records, grads=self._densify(grads))

    def _graph(self, call: Callable[[list[Any], dict[str, Any]], Any]) -> tuple[Any, list[str], list[bool]]:
        """A ``tf.function`` computing the VJP of ``call``, traced once per shape signature."""
        tf = _tf.tensorflow()
        names = [a.name for a in self.plan.tensors]
        constants = {a.name: a.value for a in self.plan.leaves if a.spec is None}
        nones: list[bool] = []

        def vjp(tensor_list: list[Any], upstream_list: list[Any]) -> list[Any]:
            tensors = dict(zip(names, tensor_list))
            tensors.update(constants)
            grads = self._vjp(call, tensors, upstream_list)
            nones[:] = [g is None for g in grads]
            sources = self._source_tensors(tensors)
            return [tf.zeros_like(s) if g is None else tf.convert_to_tensor(g) for g, s in zip(grads, sources)]

        # A partial (no __code__) gives each harness trace statistics of its own,
        # so TensorFlow does not call one trace per checked function "retracing".
        return tf.function(functools.partial(vjp), autograph=False), names, nones

    def _run_graph(
        self, graph: tuple[Any, list[str], list[bool]], values: dict[str, Any], upstreams: list[np.ndarray]
    ) -> dict[str, np.ndarray | None]:
        function, names, nones = graph
        tensors = self._apply(values)
        grads = function([tensors[n] for n in names], self._upstream_tensors(upstreams))
        dense = self._densify(list(grads))
        for source, is_none in zip(self.sources, nones):
            if is_none:
                dense[source.name] = None
        return dense

    def _custom_function(self, values: dict[str, Any], upstreams: list[np.ndarray]) -> Outcome:
        if self._graph_vjp is None:
            records = self._graph_records
            self._graph_vjp = self._graph(lambda a, k: self.target.custom(a, k, records, False))
        try:
            dense = self._run_graph(self._graph_vjp, values, upstreams)
        except Exception as error:  # the user's code raised while tracing or running
            if raised_by_gradcheck(error):
                raise
            return Outcome("function", self._graph_records, error=error)
        return Outcome("function", self._graph_records, grads=dense)

    def native(self, values: dict[str, Any], upstreams: list[np.ndarray], execution: str = "eager") -> Outcome:
        """Native autodiff of the same forward pass: the backward function is never called."""
        try:
            if execution == "function":
                if self._graph_native is None:
                    self._graph_native = self._graph(self.target.native)
                return Outcome("function", grads=self._run_graph(self._graph_native, values, upstreams))
            tensors = self._apply(values)
            grads = self._vjp(self.target.native, tensors, self._upstream_tensors(upstreams))
        except Exception as error:  # the user's forward raised
            if raised_by_gradcheck(error):
                raise
            return Outcome(execution, error=error)
        return Outcome(execution, grads=self._densify(grads))

    def second_order(
        self, values: dict[str, Any], upstreams: list[np.ndarray], weights: dict[str, np.ndarray], path: str
    ) -> Outcome:
        """The gradient of ``sum_j <weights_j, first-order gradient_j>`` with respect to every source.

        ``path`` is ``custom`` (differentiating through the user's backward
        function) or ``native`` (through TensorFlow's own).
        """
        tf = _tf.tensorflow()
        records: list[BackwardRecord] = []
        call = (lambda a, k: self.target.custom(a, k, records, True)) if path == "custom" else self.target.native
        try:
            tensors = self._apply(values)
            sources = self._source_tensors(tensors)
            with tf.GradientTape(watch_accessed_variables=False) as outer:
                for source in sources:
                    outer.watch(source)
                first = self._vjp(call, tensors, self._upstream_tensors(upstreams))
                total = tf.constant(0.0, dtype=tf.float64)
                for source, grad in zip(self.sources, first):
                    if grad is None or source.name not in weights:
                        continue
                    grad = tf.convert_to_tensor(grad)
                    weight = tf.constant(weights[source.name], dtype=grad.dtype)
                    total += tf.cast(tf.reduce_sum(weight * grad), tf.float64)
            second = outer.gradient(total, sources)
        except Exception as error:  # the user's backward function is not differentiable, or raised
            if raised_by_gradcheck(error):
                raise
            return Outcome("eager", records, error=error)
        return Outcome("eager", records, grads=self._densify(second))

    # -- batched losses for finite differences -------------------------------

    def losses(self, values: dict[str, Any], upstreams: list[np.ndarray]) -> BatchedLoss:
        """The loss at many perturbations of one input, in as few forward calls as the function allows.

        Three ways, tried in order and validated once per input against
        one-at-a-time evaluation: stacking the perturbed copies along a new
        leading axis (for functions that broadcast over it, as elementwise
        ops and matmul do), ``tf.vectorized_map`` over them, or a loop.
        """

        def evaluate(name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
            strategy = self._batching_strategy(name, values, upstreams)
            if strategy == "stack":
                return self._stacked_losses(values, upstreams, name, perturbations)
            if strategy == "vectorized":
                return self._vectorized_losses(values, upstreams, name, perturbations)
            return one_at_a_time(lambda moved: self.loss(moved, upstreams), values)(name, perturbations)

        return evaluate

    def _leaf(self, name: str) -> Any:
        return next((a for a in self.plan.leaves if a.name == name), None)

    def _batch_rows(self, name: str) -> int:
        leaf = self._leaf(name)
        size = leaf.spec.size if leaf is not None and leaf.spec is not None else 1
        outputs = sum(int(np.prod(s.shape, dtype=np.int64)) for s in self.output_specs or [])
        return max(1, BATCH_FLOATS // max(1, size + outputs))

    def _stacked_losses(
        self, values: dict[str, Any], upstreams: list[np.ndarray], name: str, perturbations: Perturbations
    ) -> tuple[np.ndarray, np.ndarray]:
        """One forward call per batch, the perturbed copies stacked along a new leading axis."""
        tf = _tf.tensorflow()
        leaf = self._leaf(name)
        tensors = self._apply(values)
        base = np.asarray(values[name], dtype=np.float64)
        upstream_list = [tf.constant(u, dtype=tf.float64) for u in upstreams]
        totals: list[np.ndarray] = []
        scales: list[np.ndarray] = []
        rows = self._batch_rows(name)
        for start in range(0, perturbations.count, rows):
            stacked = perturbations.tensor(base, start, start + rows, leaf.spec.dtype)
            tensors[name] = stacked
            args, kwargs = self._arguments(tensors)
            self.forward_evaluations += 1
            outputs = self._float_outputs(self.target.native(args, kwargs))
            total, scale = _stacked_loss(outputs, upstream_list, int(stacked.shape[0]))
            totals.append(total)
            scales.append(scale)
        return np.concatenate(totals), np.concatenate(scales)

    def _vectorized_losses(
        self, values: dict[str, Any], upstreams: list[np.ndarray], name: str, perturbations: Perturbations
    ) -> tuple[np.ndarray, np.ndarray]:
        """``tf.vectorized_map`` over the perturbed copies, batches padded to one size (one trace)."""
        tf = _tf.tensorflow()
        rows = min(self._batch_rows(name), 256)
        function, names = self._vectorized.get(name) or self._vectorized_function(name)
        leaf = self._leaf(name)
        tensors = self._apply(values)
        base = np.asarray(values[name], dtype=np.float64)
        upstream_list = self._upstream_tensors(upstreams)
        totals: list[np.ndarray] = []
        scales: list[np.ndarray] = []
        for start in range(0, perturbations.count, rows):
            stacked = perturbations.apply(base, start, start + rows)
            count = len(stacked)
            if count < rows:
                stacked = np.concatenate([stacked, np.repeat(base[None], rows - count, axis=0)])
            result = function(tf.constant(stacked, dtype=leaf.spec.dtype), [tensors[n] for n in names], upstream_list)
            result = result.numpy()
            totals.append(result[:count, 0])
            scales.append(result[:count, 1])
        return np.concatenate(totals), np.concatenate(scales)

    def _vectorized_function(self, name: str) -> tuple[Any, list[str]]:
        tf = _tf.tensorflow()
        names = [a.name for a in self.plan.tensors if a.name != name]
        constants = {a.name: a.value for a in self.plan.leaves if a.spec is None}

        def body(stacked: Any, tensor_list: list[Any], upstream_list: list[Any]) -> Any:
            base = dict(zip(names, tensor_list))
            base.update(constants)

            def one(moved: Any) -> Any:
                tensors = dict(base)
                tensors[name] = moved
                self.forward_evaluations += 1
                args, kwargs = self._arguments(tensors)
                outputs = self._float_outputs(self.target.native(args, kwargs))
                products = [tf.cast(o, tf.float64) * tf.cast(u, tf.float64) for o, u in zip(outputs, upstream_list)]
                total = tf.add_n([tf.reduce_sum(p) for p in products])
                scale = tf.add_n([tf.reduce_sum(tf.abs(p)) for p in products])
                return tf.stack([total, scale])

            return tf.vectorized_map(one, stacked)

        # A partial (no __code__) gives each harness trace statistics of its own,
        # so TensorFlow does not call one trace per checked function "retracing".
        entry = (tf.function(functools.partial(body), autograph=False), names)
        self._vectorized[name] = entry
        return entry

    def _batching_strategy(self, name: str, values: dict[str, Any], upstreams: list[np.ndarray]) -> str:
        """How to evaluate many perturbations of ``name``: chosen once, by trying and checking."""
        if name in self.batching:
            return self.batching[name][0]
        if self._leaf(name) is None:
            self.batching[name] = ("loop", "a variable is one tensor that cannot be stacked")
            return "loop"
        base = np.asarray(values[name], dtype=np.float64)
        rng = np.random.default_rng(0)
        probes = Perturbations.from_dense(
            1e-3 * rng.standard_normal(size=(3, *base.shape)) * np.maximum(1.0, np.abs(base))
        )
        expected_total, expected_scale = one_at_a_time(lambda moved: self.loss(moved, upstreams), values)(name, probes)
        dtype = self._leaf(name).spec.dtype
        tolerance = 1e3 * EPSILON.get(dtype, 1e-7) * (expected_scale + np.abs(expected_total)) + 1e-300
        reasons = []
        for strategy, evaluate in (("stack", self._stacked_losses), ("vectorized", self._vectorized_losses)):
            try:
                total, _ = evaluate(values, upstreams, name, probes)
            except Exception as error:  # the function does not batch this way
                if raised_by_gradcheck(error):
                    raise
                reasons.append(f"{strategy}: {type(error).__name__}")
                continue
            if total.shape == expected_total.shape and np.all(np.abs(total - expected_total) <= tolerance):
                self.batching[name] = (strategy, "")
                return strategy
            reasons.append(f"{strategy}: results differ from one-at-a-time evaluation")
        self.batching[name] = ("loop", "; ".join(reasons))
        return "loop"

    def first_order_loss(
        self, values: dict[str, Any], upstreams: list[np.ndarray], weights: dict[str, np.ndarray]
    ) -> tuple[float, float]:
        """``sum_j <weights_j, custom gradient_j>``: the function whose gradient second order checks."""
        outcome = self.custom(values, upstreams, "eager")
        if outcome.error is not None:
            raise outcome.error
        assert outcome.grads is not None
        total = 0.0
        scale = 0.0
        for name, weight in weights.items():
            grad = outcome.grads.get(name)
            if grad is None or grad.shape != weight.shape:
                continue
            products = weight * grad
            total += float(np.sum(products))
            scale += float(np.sum(np.abs(products)))
        return total, scale


#: Stacks up to this many rows also get exact per-row rounding scales; larger ones (full
#: mode's) take the scale from their center row, which a separate one-row call provides.
_SCALED_ROWS = 16


def _stacked_loss(outputs: list[Any], upstreams: list[Any], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a stacked evaluation, the loss (and its rounding scale); raises if rows did not stay apart.

    Reduced inside TensorFlow as one matrix-vector product per output, so
    only a number or two per row come back.
    """
    tf = _tf.tensorflow()
    total = tf.zeros([rows], dtype=tf.float64)
    scale = tf.zeros([rows], dtype=tf.float64)
    for output, upstream in zip(outputs, upstreams):
        expected = (rows, *upstream.shape.as_list())
        if tuple(output.shape.as_list()) != expected:
            raise NotBatchable(f"stacked output has shape {tuple(output.shape.as_list())}, expected {expected}")
        flat = tf.reshape(tf.cast(output, tf.float64), [rows, -1])
        weights = tf.reshape(upstream, [-1])
        total += tf.linalg.matvec(flat, weights)
        if rows <= _SCALED_ROWS:
            scale += tf.linalg.matvec(tf.abs(flat), tf.abs(weights))
    scales = scale.numpy() if rows <= _SCALED_ROWS else np.full(rows, np.nan)
    return total.numpy(), scales


class NotBatchable(ValueError):
    """The function does not keep a new leading axis apart."""


def _default_variable_name(variable: Any) -> str:
    name = getattr(variable, "name", "variable")
    return name[:-2] if name.endswith(":0") else name


# -- finite differences -----------------------------------------------------------


class Perturbations:
    """A stack of perturbations of one input: dense rows, or a few scaled elements per row.

    Full mode perturbs one element (or a symmetric pair) per row; keeping
    those rows sparse spares building, copying and adding a dense array the
    size of the input for every element.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        dense: np.ndarray | None = None,
        rows: np.ndarray | None = None,
        elements: np.ndarray | None = None,
        amounts: np.ndarray | None = None,
        count: int = 0,
    ) -> None:
        self.shape = shape
        self._dense = dense
        self._rows = rows
        self._elements = elements
        self._amounts = amounts
        self.count = len(dense) if dense is not None else count

    @classmethod
    def from_dense(cls, deltas: np.ndarray) -> Perturbations:
        """Rows given as whole arrays, ``deltas[k]`` of the input's shape."""
        return cls(tuple(deltas.shape[1:]), dense=np.asarray(deltas, dtype=np.float64))

    @classmethod
    def sparse(
        cls, shape: tuple[int, ...], rows: np.ndarray, elements: np.ndarray, amounts: np.ndarray, count: int
    ) -> Perturbations:
        """Row ``rows[i]`` moves flat element ``elements[i]`` by ``amounts[i]``."""
        return cls(shape, rows=rows, elements=elements, amounts=amounts, count=count)

    def apply(self, base: np.ndarray, start: int = 0, stop: int | None = None) -> np.ndarray:
        """``base`` plus rows ``start:stop``, stacked along a new leading axis."""
        stop = self.count if stop is None else min(stop, self.count)
        if self._dense is not None:
            return base[None] + self._dense[start:stop]
        stacked = np.repeat(base.reshape(1, -1), stop - start, axis=0)
        chosen = (self._rows >= start) & (self._rows < stop)  # type: ignore[operator]
        np.add.at(stacked, (self._rows[chosen] - start, self._elements[chosen]), self._amounts[chosen])  # type: ignore[index]
        return stacked.reshape((stop - start, *self.shape))

    def tensor(self, base: np.ndarray, start: int, stop: int, dtype: str) -> Any:
        """:meth:`apply` as a TensorFlow tensor, built by TensorFlow: a tiled copy of ``base``
        with the few moved elements scattered in, without a stack-sized numpy array in between."""
        tf = _tf.tensorflow()
        stop = min(stop, self.count)
        if self._dense is not None:
            return tf.constant(self.apply(base, start, stop), dtype=dtype)
        rows = stop - start
        chosen = (self._rows >= start) & (self._rows < stop)  # type: ignore[operator]
        indices = np.stack([self._rows[chosen] - start, self._elements[chosen]], axis=1)  # type: ignore[index]
        flat = tf.constant(base.reshape(1, -1), dtype=dtype)
        stacked = tf.tensor_scatter_nd_add(
            tf.tile(flat, [rows, 1]),
            indices,
            tf.constant(self._amounts[chosen], dtype=dtype),  # type: ignore[index]
        )
        return tf.reshape(stacked, (rows, *self.shape))

    def row(self, index: int) -> np.ndarray:
        """Row ``index`` as a whole array."""
        if self._dense is not None:
            return self._dense[index]
        delta = np.zeros(int(np.prod(self.shape, dtype=np.int64)))
        chosen = self._rows == index
        np.add.at(delta, self._elements[chosen], self._amounts[chosen])  # type: ignore[index]
        return delta.reshape(self.shape)


#: ``loss(values)``: ``sum_i <upstream_i, output_i>`` and its rounding scale, at one point.
Loss = Callable[[dict[str, Any]], tuple[float, float]]
#: ``losses(name, perturbations)``: the loss and its rounding scale at ``values[name] + row``
#: for every row of a stack of perturbations of one input, as two arrays.
BatchedLoss = Callable[[str, Perturbations], tuple[np.ndarray, np.ndarray]]

#: Floats in one stack of perturbed inputs (64 MB): big enough that a batched matmul runs
#: near full speed, small enough that full mode's peak memory stays in the tens of MB.
BATCH_FLOATS = 8_000_000


def one_at_a_time(loss: Loss, values: dict[str, Any]) -> BatchedLoss:
    """A batched loss that evaluates each perturbation on its own (for losses that cannot batch)."""

    def losses(name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
        results = []
        for index in range(perturbations.count):
            moved = dict(values)
            moved[name] = values[name] + perturbations.row(index)
            results.append(loss(moved))
        totals, scales = zip(*results) if results else ((), ())
        return np.asarray(totals, dtype=np.float64), np.asarray(scales, dtype=np.float64)

    return losses


@dataclass(frozen=True)
class DirectionalEstimate:
    """A finite-difference estimate of ``<gradient, direction>``."""

    value: float
    """Richardson-extrapolated central difference."""
    error: float
    """A bound on its own error: step-halving difference, kink detector and rounding."""
    evaluations: int
    """Loss evaluations it took."""


def _combine(
    center: np.ndarray,
    scale: np.ndarray,
    plus1: np.ndarray,
    minus1: np.ndarray,
    plus2: np.ndarray,
    minus2: np.ndarray,
    step: float,
    dtype: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Richardson-combined central differences and their error bounds (element-wise over directions).

    The error bound has three parts: the difference between the two step
    sizes (truncation), ``eps * scale / h`` (rounding of the loss itself),
    and a kink detector. A kink inside both steps fools the first part,
    since both central differences then see the same ramp; but it makes the
    one-sided differences disagree by the jump in slope whatever the step,
    while for a smooth function their disagreement shrinks linearly with the
    step. ``2 * A(h) - A(2h)``, with ``A(h) = (L(h) - 2 L(0) + L(-h)) / h``,
    is O(h^3) for smooth functions and the size of the jump at a kink.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        near = (plus1 - minus1) / (2 * step)
        far = (plus2 - minus2) / (4 * step)
        estimate = near + (near - far) / 3.0
        asymmetry_near = (plus1 - 2 * center + minus1) / step
        asymmetry_far = (plus2 - 2 * center + minus2) / (2 * step)
        kink = np.abs(2 * asymmetry_near - asymmetry_far)
        rounding = 16.0 * EPSILON[dtype] * scale / step
        error = np.abs(near - far) + kink + rounding
    bad = ~(np.isfinite(estimate) & np.isfinite(error))
    return np.where(bad, np.nan, estimate), np.where(bad, np.inf, error)


def directional_derivative(
    losses: BatchedLoss, name: str, direction: np.ndarray, step: float, dtype: str
) -> DirectionalEstimate:
    """Central differences along ``direction`` at steps ``h`` and ``2h``: one batch of five points."""
    deltas = np.stack(
        [np.zeros_like(direction), step * direction, -step * direction, 2 * step * direction, -2 * step * direction]
    )
    totals, scales = losses(name, Perturbations.from_dense(deltas))
    estimate, error = _combine(totals[0], scales[0], *totals[1:], step, dtype)
    return DirectionalEstimate(float(estimate), float(error), len(deltas))


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
    losses: BatchedLoss,
    base: np.ndarray,
    name: str,
    scale: np.ndarray,
    step: float,
    dtype: str,
    symmetric: bool,
    accept: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The whole gradient by central differences, with a per-element error bound.

    Each element's perturbations go to ``losses`` as rows of sparse stacks,
    so a loss that evaluates a stack in one call (see :meth:`Harness.losses`)
    does the whole gradient in a few calls. With ``accept``, a first pass
    takes one forward difference per element and only the elements
    ``accept(estimate, error)`` rejects get central differences at two steps,
    Richardson extrapolation and the kink detector; without it every element
    does. For symmetric inputs each off-diagonal pair is perturbed by half a
    step each, so the estimate is the symmetric part of the gradient.
    """
    base = np.asarray(base, dtype=np.float64)
    gradient = np.full(base.shape, np.nan)
    error = np.full(base.shape, np.inf)
    groups = element_directions(base.shape, symmetric)
    center, center_scale = losses(name, Perturbations.from_dense(np.zeros((1, *base.shape))))
    evaluations = 1
    flat_scale = scale.reshape(-1)
    strides = np.array([int(np.prod(base.shape[i + 1 :], dtype=np.int64)) for i in range(base.ndim)], dtype=np.int64)

    def flat(index: tuple[int, ...]) -> int:
        return int(np.dot(index, strides)) if index else 0

    members = [[flat(index) for index in group] for group in groups]
    weights = [0.5 if len(group) == 2 else 1.0 for group in groups]

    def evaluate(chosen: list[int], offsets: tuple[float, ...]) -> list[np.ndarray]:
        """Losses at every offset (in units of the element's scale) along each chosen group's direction."""
        rows, elements, amounts = [], [], []
        for block, offset in enumerate(offsets):
            for position, group in enumerate(chosen):
                for element in members[group]:
                    rows.append(block * len(chosen) + position)
                    elements.append(element)
                    amounts.append(offset * weights[group] * flat_scale[element])
        stack = Perturbations.sparse(
            base.shape, np.asarray(rows), np.asarray(elements), np.asarray(amounts), len(offsets) * len(chosen)
        )
        totals, _ = losses(name, stack)
        return [totals[i * len(chosen) : (i + 1) * len(chosen)] for i in range(len(offsets))]

    def store(chosen: list[int], estimate: np.ndarray, bound: np.ndarray) -> None:
        for position, group in enumerate(chosen):
            # d/dt L(x + t * direction) = sum_g weight * scale * grad[g]; for a symmetric
            # pair both gradient entries share the value, so divide by the scale once.
            divisor = flat_scale[members[group][0]]
            for index in groups[group]:
                gradient[index] = estimate[position] / divisor
                error[index] = bound[position] / divisor

    per_batch = max(1, BATCH_FLOATS // (4 * max(base.size, 1)))
    everything = list(range(len(groups)))
    if accept is None:
        refine = everything
    else:
        # First pass: one forward difference per element at the step that balances its
        # O(h) truncation against rounding (sqrt of machine epsilon). It confirms a right
        # gradient at half the cost of central differences; anything it cannot confirm
        # gets the careful second pass.
        quick = math.sqrt(EPSILON[dtype])
        rounding = 4.0 * EPSILON[dtype] * center_scale[0] / quick
        for start in range(0, len(everything), per_batch):
            chosen = everything[start : start + per_batch]
            (moved,) = evaluate(chosen, (quick,))
            evaluations += len(chosen)
            with np.errstate(invalid="ignore", over="ignore"):
                store(chosen, (moved - center[0]) / quick, np.full(len(chosen), rounding))
        accepted = np.asarray(accept(gradient, error), dtype=bool).reshape(-1)
        refine = [g for g in everything if not accepted[members[g][0]]]
    for start in range(0, len(refine), per_batch):
        chosen = refine[start : start + per_batch]
        plus1, minus1, plus2, minus2 = evaluate(chosen, (step, -step, 2 * step, -2 * step))
        evaluations += 4 * len(chosen)
        estimate, bound = _combine(center[0], center_scale[0], plus1, minus1, plus2, minus2, step, dtype)
        store(chosen, estimate, bound)
    return gradient, error, evaluations
