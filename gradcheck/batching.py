"""The loss at many perturbations of one input, in as few forward calls as the function allows.

Three strategies, tried in order and validated once per input against
one-at-a-time evaluation: stacking the perturbed copies along a new leading
axis (for functions that broadcast over it, as elementwise ops and matmul
do), ``tf.vectorized_map`` over them, or a loop. The forward pass itself is
the harness's (:class:`ForwardPass`); what the losses are used for is
:mod:`gradcheck.finite_differences`'.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import numpy as np

from gradcheck import _tf, loss
from gradcheck.arrays import aligned_empty
from gradcheck.dtypes import EPSILON
from gradcheck.finite_differences import BATCH_FLOATS, BatchedLoss, Perturbations, one_at_a_time
from gradcheck.inputs import CallPlan
from gradcheck.instrument import raised_by_gradcheck
from gradcheck.loss import Draw


class NotBatchable(ValueError):
    """The function does not keep a new leading axis apart."""


class ForwardPass(Protocol):
    """What the batching strategies need from a harness: its plan and its native forward pass, in pieces."""

    plan: CallPlan

    @property
    def output_size(self) -> int:
        """Elements in all float outputs of the forward pass together."""
        ...

    def as_tensors(self, values: dict[str, Any]) -> dict[str, Any]:
        """TensorFlow tensors for the tensor leaves of ``values`` (variables assigned on the way)."""
        ...

    def native_outputs(self, tensors: dict[str, Any]) -> list[Any]:
        """The float outputs of one native forward call on ``tensors``."""
        ...

    def loss(self, draw: Draw) -> tuple[float, float]:
        """The loss and its rounding scale at one point."""
        ...

    def upstream_tensors(self, upstreams: list[np.ndarray]) -> list[Any]:
        """The upstream arrays as tensors of their outputs' dtypes."""
        ...


def stacked_tensor(perturbations: Perturbations, base: np.ndarray, start: int, stop: int, dtype: str) -> Any:
    """``perturbations.apply(base, start, stop)`` as a tensor, built by TensorFlow: a tiled copy of ``base``
    with the few moved elements scattered in, without a stack-sized numpy array in between."""
    tf = _tf.tensorflow()
    stop = min(stop, perturbations.count)
    if perturbations.dense or perturbations.directed:
        out = aligned_empty((stop - start, *perturbations.shape)) if dtype == "float64" else None
        return _tf.adopt(perturbations.apply(base, start, stop, out=out), dtype)
    rows, elements, amounts = perturbations.moves(start, stop)
    flat = tf.constant(base.reshape(1, -1), dtype=dtype)
    stacked = tf.tensor_scatter_nd_add(
        tf.tile(flat, [stop - start, 1]), np.stack([rows, elements], axis=1), tf.constant(amounts, dtype=dtype)
    )
    return tf.reshape(stacked, (stop - start, *perturbations.shape))


def _rows_kept_apart(outputs: list[Any], upstreams: list[Any], rows: int) -> None:
    """Raise where a stacked evaluation's outputs did not keep the ``rows`` of the stack apart."""
    for output, upstream in zip(outputs, upstreams):
        expected = (rows, *upstream.shape.as_list())
        if tuple(output.shape.as_list()) != expected:
            raise NotBatchable(f"stacked output has shape {tuple(output.shape.as_list())}, expected {expected}")


class Batcher:
    """One forward pass's loss at stacks of perturbations, by the fastest strategy that gives the same numbers."""

    def __init__(self, forward: ForwardPass) -> None:
        self.forward = forward
        #: Per input: how its finite differences are batched (``stack``, ``vectorized``, ``loop``) and why.
        self.strategies: dict[str, tuple[str, str]] = {}
        self._vectorized: dict[str, tuple[Any, list[str]]] = {}

    def losses(self, draw: Draw) -> BatchedLoss:
        """The loss at perturbations of the draw's values, one input at a time, by each input's strategy."""

        center: list[tuple[float, float]] = []  # the loss at the draw itself, once known: every input shares it

        def evaluate(name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
            if name not in self.strategies and self._leaf(name) is not None and perturbations.count >= 2:
                return self._choose_on(draw, name, perturbations, center)
            strategy = self.strategy(name, draw)
            if strategy == "stack":
                return self._stacked_losses(draw, name, perturbations)
            if strategy == "vectorized":
                return self._vectorized_losses(draw, name, perturbations)
            return self._one_at_a_time(draw)(name, perturbations)

        return evaluate

    def _one_at_a_time(self, draw: Draw) -> BatchedLoss:
        return one_at_a_time(lambda moved: self.forward.loss(draw.at(moved)), draw.values)

    def _leaf(self, name: str) -> Any:
        return next((a for a in self.forward.plan.leaves if a.name == name), None)

    def _batch_rows(self, name: str) -> int:
        leaf = self._leaf(name)
        size = leaf.spec.size if leaf is not None and leaf.spec is not None else 1
        return max(1, BATCH_FLOATS // max(1, size + self.forward.output_size))

    def _stacked_losses(self, draw: Draw, name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
        """One forward call per batch, the perturbed copies stacked along a new leading axis."""
        tf = _tf.tensorflow()
        leaf = self._leaf(name)
        tensors = self.forward.as_tensors(draw.values)
        base = np.asarray(draw.values[name], dtype=np.float64)
        upstream_list = [tf.constant(u, dtype=tf.float64) for u in draw.upstreams]
        totals: list[np.ndarray] = []
        scales: list[np.ndarray] = []
        rows = self._batch_rows(name)
        for start in range(0, perturbations.count, rows):
            stacked = stacked_tensor(perturbations, base, start, start + rows, leaf.spec.dtype)
            tensors[name] = stacked
            outputs = self.forward.native_outputs(tensors)
            _rows_kept_apart(outputs, upstream_list, int(stacked.shape[0]))
            total, scale = loss.stacked(outputs, upstream_list, int(stacked.shape[0]), scaled=start == 0)
            totals.append(total)
            scales.append(scale)
        return np.concatenate(totals), np.concatenate(scales)

    def _vectorized_losses(self, draw: Draw, name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
        """``tf.vectorized_map`` over the perturbed copies, batches padded to one size (one trace)."""
        tf = _tf.tensorflow()
        rows = min(self._batch_rows(name), 256)
        function, names = self._vectorized.get(name) or self._vectorized_function(name)
        leaf = self._leaf(name)
        tensors = self.forward.as_tensors(draw.values)
        base = np.asarray(draw.values[name], dtype=np.float64)
        upstream_list = self.forward.upstream_tensors(draw.upstreams)
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
        plan = self.forward.plan
        names = [a.name for a in plan.tensors if a.name != name]
        constants = {a.name: a.value for a in plan.leaves if a.spec is None}

        def body(stacked: Any, tensor_list: list[Any], upstream_list: list[Any]) -> Any:
            base = dict(zip(names, tensor_list))
            base.update(constants)

            def one(moved: Any) -> Any:
                tensors = dict(base)
                tensors[name] = moved
                return loss.traced(self.forward.native_outputs(tensors), upstream_list)

            return tf.vectorized_map(one, stacked)

        # A partial (no __code__) gives each harness trace statistics of its own,
        # so TensorFlow does not call one trace per checked function "retracing".
        entry = (tf.function(functools.partial(body), autograph=False), names)
        self._vectorized[name] = entry
        return entry

    def strategy(self, name: str, draw: Draw) -> str:
        """How to evaluate many perturbations of ``name``: chosen once, by trying and checking on random probes."""
        if name in self.strategies:
            return self.strategies[name][0]
        if self._leaf(name) is None:
            self.strategies[name] = ("loop", "a variable is one tensor that cannot be stacked")
            return "loop"
        base = np.asarray(draw.values[name], dtype=np.float64)
        rng = np.random.default_rng(0)
        probes = Perturbations.from_dense(
            1e-3 * rng.standard_normal(size=(3, *base.shape)) * np.maximum(1.0, np.abs(base))
        )
        expected = self._one_at_a_time(draw)(name, probes)
        self._first_agreeing(draw, name, probes, np.arange(3), expected)
        return self.strategies[name][0]

    def _choose_on(
        self,
        draw: Draw,
        name: str,
        perturbations: Perturbations,
        center: list[tuple[float, float]],
    ) -> tuple[np.ndarray, np.ndarray]:
        """Choose the strategy on a stack that is needed anyway, and return its losses.

        Its first and last rows, evaluated one at a time, are what a strategy
        must reproduce: a function that mixes the rows of a stack (a sum or a
        normalisation over the leading axis, a cumulative sum) changes one of
        them. Spares the random probes of :meth:`strategy`: fast mode's
        directional stacks are the first a check evaluates.
        """
        values = draw.values
        checked = np.array([0, perturbations.count - 1])
        single = []
        for index in checked:
            row = perturbations.row(index)
            if center and not np.any(row):
                single.append(center[0])
                continue
            single.append(self.forward.loss(draw.at({**values, name: values[name] + row})))
            if not np.any(row):
                center.append(single[-1])
        expected = (np.array([t for t, _ in single]), np.array([s for _, s in single]))
        found = self._first_agreeing(draw, name, perturbations, checked, expected)
        if found is not None:
            return found
        rest = [i for i in range(perturbations.count) if i not in checked]
        totals, scales = np.empty(perturbations.count), np.empty(perturbations.count)
        totals[checked], scales[checked] = expected
        for index in rest:
            totals[index], scales[index] = self.forward.loss(
                draw.at({**values, name: values[name] + perturbations.row(index)})
            )
        return totals, scales

    def _first_agreeing(
        self,
        draw: Draw,
        name: str,
        perturbations: Perturbations,
        checked: np.ndarray,
        expected: tuple[np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Record the first batched strategy whose losses at rows ``checked`` match one-at-a-time evaluation
        (``loop`` where none does, and why) and return its losses at every row (None for ``loop``)."""
        expected_total, expected_scale = expected
        dtype = self._leaf(name).spec.dtype
        tolerance = 1e3 * EPSILON.get(dtype, 1e-7) * (expected_scale + np.abs(expected_total)) + 1e-300
        reasons = []
        for strategy, evaluate in (("stack", self._stacked_losses), ("vectorized", self._vectorized_losses)):
            try:
                total, scale = evaluate(draw, name, perturbations)
            except Exception as error:  # the function does not batch this way
                if raised_by_gradcheck(error):
                    raise
                reasons.append(f"{strategy}: {type(error).__name__}")
                continue
            if total.shape == (perturbations.count,) and np.all(np.abs(total[checked] - expected_total) <= tolerance):
                self.strategies[name] = (strategy, "")
                return total, scale
            reasons.append(f"{strategy}: results differ from one-at-a-time evaluation")
        self.strategies[name] = ("loop", "; ".join(reasons))
        return None
