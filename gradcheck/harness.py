"""Runs one call target the ways gradcheck needs: forward, custom and native gradients, losses.

:class:`Harness` runs a custom-gradient subject through its call target
(:mod:`gradcheck.targets`) with one call plan: with the custom gradients
instrumented (:mod:`gradcheck.instrument`) to see exactly what the backward
function returned and whether TensorFlow called it at all, natively (autodiff
of the undecorated forward under a ``GradientTape``), eagerly or inside a
``tf.function``, and forward only, batched (:mod:`gradcheck.batching`), for
the finite differences of :mod:`gradcheck.finite_differences`. It computes,
never judges. A harness is built from the first forward pass
(:mod:`gradcheck.first_pass`), which found the outputs and the variables.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcheck import _tf
from gradcheck.batching import Batcher
from gradcheck.feed import all_frozen, identity_key, same_objects
from gradcheck.finite_differences import BatchedLoss, Perturbations
from gradcheck.first_pass import FirstPass, dense
from gradcheck.inputs import CallPlan
from gradcheck.instrument import BackwardRecord, Outcome, raised_by_gradcheck, real_float64
from gradcheck.loss import Draw, pairing
from gradcheck.targets import CallTarget
from gradcheck.targets.proxy import Centre, ProxiedTarget


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


class Harness:
    """Runs one call target with one call plan: forward, custom and native gradients, losses.

    ``values`` everywhere is a :class:`~gradcheck.loss.Draw`'s values.
    Variables are set from ``values`` before each call, and :meth:`restore`
    puts the user's values back.
    """

    def __init__(self, target: CallTarget, plan: CallPlan, first: FirstPass) -> None:
        self.target = target
        self.plan = plan
        self.variables = first.variables
        self.output_specs = first.specs
        #: Where each float output sits in the result (a dict key, a tuple index), in upstream order.
        self.output_labels = first.labels
        self._tensors = first.tensors
        self._graph_vjp: Any = None
        self._graph_records: list[BackwardRecord] = []
        self._graph_native: Any = None
        self._batcher = Batcher(self)
        #: Per input: how its finite differences are batched (``stack``, ``vectorized``, ``loop``) and why.
        self.batching: dict[str, tuple[str, str]] = self._batcher.strategies
        # The values (by identity) of the last native forward pass and its float outputs (tensors until
        # first asked for as float64 arrays).
        self._forward_memo: tuple[list[Any], list[Any]] | None = None
        if first.key is not None:
            self._forward_memo = (first.key, first.outputs)
        # Native autodiff at the first draw, from the first pass's tape: given once, at that very draw.
        self._native_ahead = first.native
        self._around = _Around(target) if isinstance(target, ProxiedTarget) else None

    def forget_traces(self) -> None:
        """Drop the ``tf.function`` legs traced so far and the remembered forward pass: the target is called
        differently from now on."""
        self._graph_vjp = None
        self._graph_native = None
        self._graph_records = []
        self._forward_memo = None  # its outputs came from the target called the old way
        self._native_ahead = None

    # -- sources and values ----------------------------------------------------

    @property
    def sources(self) -> list[Source]:
        """Inputs then variables: everything a gradient is checked for."""
        found = []
        for argument in self.plan.differentiable:
            spec = argument.spec
            assert spec is not None, argument.name  # a harness's plan has every shape: probing came first
            found.append(Source(argument.name, spec.shape, spec.dtype, "input", spec.symmetric))
        found.extend(
            Source(name, tuple(variable.shape.as_list()), variable.dtype.name, "variable")
            for name, variable in self.variables
        )
        return found

    def as_tensors(self, values: dict[str, Any]) -> dict[str, Any]:
        """TF tensors for the tensor leaves; variables assigned from ``values``."""
        tensors = self._tensors.leaves(self.plan, values)
        self.variables.assign(values)
        return tensors

    def _memo_key(self, values: dict[str, Any]) -> list[Any]:
        return identity_key(self.plan, self.variables, values)

    def _remembered(self, values: dict[str, Any]) -> list[np.ndarray] | None:
        """The float outputs at ``values`` if the last native forward pass ran on these very (frozen) arrays."""
        if self._forward_memo is None:
            return None
        key, outputs = self._forward_memo
        if not same_objects(self._memo_key(values), key):
            return None
        arrays = [o if isinstance(o, np.ndarray) else real_float64(o) for o in outputs]
        self._forward_memo = (key, arrays)
        return arrays

    def _remember(self, values: dict[str, Any], outputs: list[Any]) -> None:
        key = self._memo_key(values)
        self._forward_memo = (key, outputs) if all_frozen(key) else None

    def restore(self) -> None:
        """Put every variable back to the value it had before the check."""
        self.variables.restore()

    def _arguments(self, tensors: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return self.plan.build(lambda leaf: tensors[leaf.name])

    def _float_outputs(self, result: Any) -> list[Any]:
        return [t for _, t in _tf.differentiable_outputs(result)]

    def _source_tensors(self, tensors: dict[str, Any]) -> list[Any]:
        return [tensors[a.name] for a in self.plan.differentiable] + [v for _, v in self.variables]

    def _densify(self, grads: list[Any]) -> dict[str, np.ndarray | None]:
        return dense([s.name for s in self.sources], grads)

    # -- forward ---------------------------------------------------------------

    def outputs(self, values: dict[str, Any], centre: dict[str, Any] | None = None) -> list[np.ndarray]:
        """The float outputs of the forward pass (native path), eagerly, as float64.

        ``centre`` is the draw ``values`` were moved from (None: ``values``
        is a draw itself): a proxy's surrogates are linearized around it.
        """
        if (remembered := self._remembered(values)) is not None:
            return remembered
        if self._around is not None:
            self._around.centre(self, values if centre is None else centre)
            if (remembered := self._remembered(values)) is not None:
                return remembered
        found = [real_float64(t) for t in self.native_outputs(self.as_tensors(values))]
        self._remember(values, found)
        return found

    def native_outputs(self, tensors: dict[str, Any]) -> list[Any]:
        """The float outputs of one forward call on ``tensors`` as finite differences take it: the native call,
        or, with proxies, the call with each surrogate linearized around the centre last recorded."""
        args, kwargs = self._arguments(tensors)
        if self._around is not None:
            return self._float_outputs(self._around.linearized(args, kwargs))
        return self._float_outputs(self.target.native(args, kwargs))

    @property
    def output_size(self) -> int:
        """Elements in all float outputs of the forward pass together."""
        return sum(int(np.prod(s.shape, dtype=np.int64)) for s in self.output_specs)

    def loss(self, draw: Draw) -> tuple[float, float]:
        """``sum_i <upstream_i, output_i>`` and ``sum_i |upstream_i * output_i|`` (its rounding scale)."""
        return pairing(zip(draw.upstreams, self.outputs(draw.values, draw.centre)))

    # -- gradients -------------------------------------------------------------

    def upstream_tensors(self, upstreams: list[np.ndarray]) -> list[Any]:
        """The upstream arrays as tensors of their outputs' dtypes."""
        return self._tensors.upstreams(upstreams, [s.dtype for s in self.output_specs])

    def _vjp(
        self,
        call: Callable[[list[Any], dict[str, Any]], Any],
        tensors: dict[str, Any],
        upstream_list: list[Any],
        forward: list[Any] | None = None,
    ) -> list[Any]:
        tf = _tf.tensorflow()
        sources = self._source_tensors(tensors)
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            for source in sources:
                tape.watch(source)
            args, kwargs = self._arguments(tensors)
            result = call(args, kwargs)
            # Inside the tape: a complex output's real and imaginary parts are ops to differentiate.
            targets = self._float_outputs(result)
        if forward is not None:
            forward[:] = targets
        return tape.gradient(targets, sources, output_gradients=upstream_list)

    def custom(self, draw: Draw, execution: str) -> Outcome:
        """The custom vector-Jacobian product, through TensorFlow's own custom_gradient."""
        if execution == "function":
            return self._custom_function(draw)
        records: list[BackwardRecord] = []
        try:
            tensors = self.as_tensors(draw.values)
            grads = self._vjp(
                lambda a, k: self.target.custom(a, k, records, True), tensors, self.upstream_tensors(draw.upstreams)
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

    def _run_graph(self, graph: tuple[Any, list[str], list[bool]], draw: Draw) -> dict[str, np.ndarray | None]:
        function, names, nones = graph
        tensors = self.as_tensors(draw.values)
        grads = function([tensors[n] for n in names], self.upstream_tensors(draw.upstreams))
        dense = self._densify(list(grads))
        for source, is_none in zip(self.sources, nones):
            if is_none:
                dense[source.name] = None
        return dense

    def _custom_function(self, draw: Draw) -> Outcome:
        if self._graph_vjp is None:
            records = self._graph_records
            self._graph_vjp = self._graph(lambda a, k: self.target.custom(a, k, records, False))
        try:
            dense = self._run_graph(self._graph_vjp, draw)
        except Exception as error:  # the user's code raised while tracing or running
            if raised_by_gradcheck(error):
                raise
            return Outcome("function", self._graph_records, error=error)
        return Outcome("function", self._graph_records, grads=dense)

    def _take_native_ahead(self, draw: Draw) -> Outcome | None:
        ahead, self._native_ahead = self._native_ahead, None
        if ahead is None:
            return None
        found = [*self._memo_key(draw.values), *draw.upstreams]
        return ahead.outcome if same_objects(found, [*ahead.key, *ahead.upstreams]) else None

    def native(self, draw: Draw, execution: str = "eager") -> Outcome:
        """Native autodiff of the same forward pass: the backward function is never called."""
        if execution == "eager" and (ahead := self._take_native_ahead(draw)) is not None:
            return ahead
        forward: list[Any] = []
        try:
            if execution == "function":
                if self._graph_native is None:
                    self._graph_native = self._graph(self.target.native)
                return Outcome("function", grads=self._run_graph(self._graph_native, draw))
            tensors = self.as_tensors(draw.values)
            grads = self._vjp(self.target.native, tensors, self.upstream_tensors(draw.upstreams), forward)
        except Exception as error:  # the user's forward raised
            if raised_by_gradcheck(error):
                raise
            return Outcome(execution, error=error)
        if len(forward) == len(self.output_specs):
            # The forward pass under the tape is the one :meth:`outputs` runs: the finite differences' center.
            self._remember(draw.values, forward)
        return Outcome(execution, grads=self._densify(grads))

    def second_order(self, draw: Draw, weights: dict[str, np.ndarray], path: str) -> Outcome:
        """The gradient of ``sum_j <weights_j, first-order gradient_j>`` with respect to every source.

        ``path`` is ``custom`` (differentiating through the user's backward
        function) or ``native`` (through TensorFlow's own).
        """
        tf = _tf.tensorflow()
        records: list[BackwardRecord] = []
        call = (lambda a, k: self.target.custom(a, k, records, True)) if path == "custom" else self.target.native
        try:
            tensors = self.as_tensors(draw.values)
            sources = self._source_tensors(tensors)
            with tf.GradientTape(watch_accessed_variables=False) as outer:
                for source in sources:
                    outer.watch(source)
                first = self._vjp(call, tensors, self.upstream_tensors(draw.upstreams))
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

    def losses(self, draw: Draw) -> BatchedLoss:
        """The loss at many perturbations of one input, in as few forward calls as the function allows.

        Three ways, tried in order and validated once per input against
        one-at-a-time evaluation (see :mod:`gradcheck.batching`): stacking the
        perturbed copies along a new leading axis (for functions that
        broadcast over it, as elementwise ops and matmul do),
        ``tf.vectorized_map`` over them, or a loop.
        """
        return self._batcher.losses(draw) if self._around is None else self._around.losses(self, draw)

    def first_order_loss(self, draw: Draw, weights: dict[str, np.ndarray]) -> tuple[float, float]:
        """``sum_j <weights_j, custom gradient_j>``: the function whose gradient second order checks."""
        outcome = self.custom(draw, "eager")
        if outcome.error is not None:
            raise outcome.error
        grads = outcome.grads
        assert grads is not None
        pairs = ((weight, grads.get(name)) for name, weight in weights.items())
        return pairing((weight, grad) for weight, grad in pairs if grad is not None and grad.shape == weight.shape)


class _Around:
    """Finite differences of a target with proxies: each draw's centre recorded once (its values, by identity,
    and the surrogates' calls there), the forward pass linearized around the centre last recorded."""

    def __init__(self, target: ProxiedTarget) -> None:
        self.target = target
        self._centre: tuple[list[Any], Centre] | None = None

    def centre(self, harness: Harness, values: dict[str, Any]) -> None:
        """Record the surrogates' calls at the draw ``values``, unless they are recorded already."""
        key = harness._memo_key(values)
        if self._centre is not None and all_frozen(key) and same_objects(key, self._centre[0]):
            return
        args, kwargs = harness._arguments(harness.as_tensors(values))
        result, centre = self.target.record(args, kwargs)
        self._centre = (key, centre)
        harness._remember(values, harness._float_outputs(result))

    def linearized(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """One forward call near the centre last recorded."""
        assert self._centre is not None  # every caller records the centre first
        return self.target.linearized(args, kwargs, self._centre[1])

    def losses(self, harness: Harness, draw: Draw) -> BatchedLoss:
        """The harness's batched losses around ``draw``, its centre recorded before each evaluation."""
        evaluate = harness._batcher.losses(draw)

        def around_the_draw(name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
            self.centre(harness, draw.values)
            return evaluate(name, perturbations)

        return around_the_draw
