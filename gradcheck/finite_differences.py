"""Finite-difference gradients with their own error bounds: numpy only, computes, never judges.

Everything here takes a loss as a plain callable, so it runs (and is tested)
without TensorFlow: steps, Richardson extrapolation of central differences,
error bounds, directional derivatives and the whole-gradient loop. Where the
loss comes from is :mod:`gradcheck.harness`'s business; whether an estimate
agrees with a gradient is :mod:`gradcheck.compare`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcheck.arrays import aligned_empty
from gradcheck.dtypes import EPSILON

#: Floats in one stack of perturbed inputs (64 MB): big enough that a batched matmul runs
#: near full speed, small enough that full mode's peak memory stays in the tens of MB.
BATCH_FLOATS = 8_000_000


def default_step(dtype: str) -> float:
    """Relative finite-difference step: cbrt(machine epsilon), the optimum for central differences."""
    return EPSILON[dtype] ** (1.0 / 3.0)


class Perturbations:
    """A stack of perturbations of one input: dense rows, a few scaled elements per row, or steps along directions.

    Full mode perturbs one element (or a symmetric pair) per row; keeping
    those rows sparse spares building, copying and adding a dense array the
    size of the input for every element. Fast mode moves the input by a few
    steps along each of a few directions; those rows are kept as the
    directions and the steps, so a stack of them is built where it is used.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        dense: np.ndarray | None = None,
        rows: np.ndarray | None = None,
        elements: np.ndarray | None = None,
        amounts: np.ndarray | None = None,
        count: int = 0,
        along: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.shape = shape
        self._dense = dense
        self._rows = rows
        self._elements = elements
        self._amounts = amounts
        self._along = along
        self.count = len(dense) if dense is not None else len(along[1]) if along is not None else count

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

    @classmethod
    def along_directions(cls, directions: np.ndarray, which: np.ndarray, steps: np.ndarray) -> Perturbations:
        """Row ``k`` moves the input by ``steps[k] * directions[which[k]]``."""
        directions = np.asarray(directions, dtype=np.float64)
        along = (directions, np.asarray(which, dtype=np.int64), np.asarray(steps, dtype=np.float64))
        return cls(tuple(directions.shape[1:]), along=along)

    @property
    def dense(self) -> bool:
        """True when the rows are whole arrays (:meth:`moves` then has nothing to say)."""
        return self._dense is not None

    @property
    def directed(self) -> bool:
        """True when the rows are steps along directions (built whole by :meth:`apply`)."""
        return self._along is not None

    def moves(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For sparse rows ``start:stop``: each move's row (counted from ``start``), flat element and amount."""
        rows, elements, amounts = self._sparse()
        chosen = (rows >= start) & (rows < stop)
        return rows[chosen] - start, elements[chosen], amounts[chosen]

    def _sparse(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sparse rows' moves: each one's row, flat element and amount."""
        assert self._rows is not None and self._elements is not None and self._amounts is not None
        return self._rows, self._elements, self._amounts

    def apply(
        self, base: np.ndarray, start: int = 0, stop: int | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``base`` plus rows ``start:stop``, stacked along a new leading axis (into ``out``, where given,
        for dense rows and rows along directions)."""
        stop = self.count if stop is None else min(stop, self.count)
        if self._dense is not None:
            return np.add(base[None], self._dense[start:stop], out=out)
        if self._along is not None:
            # Row by row into one stack-sized array: the same products and sums as base + step * direction,
            # in two passes over each row.
            directions, which, steps = self._along
            stacked = np.empty((stop - start, *self.shape)) if out is None else out
            for row, index in enumerate(range(start, stop)):
                view = stacked[row, ...]  # a view even for a scalar input
                np.multiply(directions[which[index]], steps[index], out=view)
                view += base
            return stacked
        stacked = np.repeat(base.reshape(1, -1), stop - start, axis=0)
        rows, elements, amounts = self.moves(start, stop)
        np.add.at(stacked, (rows, elements), amounts)
        return stacked.reshape((stop - start, *self.shape))

    def row(self, index: int) -> np.ndarray:
        """Row ``index`` as a whole array."""
        if self._dense is not None:
            return self._dense[index]
        if self._along is not None:
            directions, which, steps = self._along
            return steps[index] * directions[which[index]]
        delta = np.zeros(int(np.prod(self.shape, dtype=np.int64)))
        rows, elements, amounts = self._sparse()
        chosen = rows == index
        np.add.at(delta, elements[chosen], amounts[chosen])
        return delta.reshape(self.shape)


#: ``loss(values)``: ``sum_i <upstream_i, output_i>`` and its rounding scale, at one point.
Loss = Callable[[dict[str, Any]], tuple[float, float]]
#: ``losses(name, perturbations)``: the loss and its rounding scale at ``values[name] + row``
#: for every row of a stack of perturbations of one input, as two arrays. Only the first row's
#: scale is certain to be there (a stacked evaluation gives NaN for the rest): callers put the
#: center, the one point whose scale they use, first.
BatchedLoss = Callable[[str, Perturbations], tuple[np.ndarray, np.ndarray]]


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


def richardson(
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

    ``plus1``, ``minus1``, ``plus2`` and ``minus2`` are the loss at ``+h``,
    ``-h``, ``+2h`` and ``-2h`` along each direction, ``center`` and
    ``scale`` the loss and its rounding scale at the point itself.

    The error bound has three parts: the difference between the two step
    sizes (truncation), ``eps * scale / h`` (rounding of the loss itself),
    and a kink detector. A kink inside both steps fools the first part,
    since both central differences then see the same ramp; but it makes the
    one-sided differences disagree by the jump in slope whatever the step,
    while for a smooth function their disagreement shrinks linearly with the
    step. ``2 * A(h) - A(2h)``, with ``A(h) = (L(h) - 2 L(0) + L(-h)) / h``,
    is O(h^3) for smooth functions and the size of the jump at a kink.
    Where either is not finite the estimate is NaN and its bound infinite.
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


def directional_derivatives(
    losses: BatchedLoss, name: str, directions: Sequence[np.ndarray], step: float, dtype: str
) -> list[DirectionalEstimate]:
    """Central differences along each direction at steps ``h`` and ``2h``, as one stack.

    The stack holds the point itself once (the center every direction
    shares) and then ``+h``, ``-h``, ``+2h``, ``-2h`` along each direction:
    ``1 + 4k`` losses for ``k`` directions, in as few forward calls as the
    loss allows. The first estimate counts the center among its evaluations.
    """
    count = len(directions)
    steps = np.array([0.0] + [step, -step, 2 * step, -2 * step] * count)
    which = np.array([0] + [index for index in range(count) for _ in range(4)])
    totals, scales = losses(name, Perturbations.along_directions(np.stack(directions), which, steps))
    moved = totals[1:].reshape(count, 4)
    plus1, minus1, plus2, minus2 = moved[:, 0], moved[:, 1], moved[:, 2], moved[:, 3]
    estimates, errors = richardson(totals[0], scales[0], plus1, minus1, plus2, minus2, step, dtype)
    return [
        DirectionalEstimate(float(estimates[index]), float(errors[index]), 4 + (index == 0)) for index in range(count)
    ]


@dataclass(frozen=True)
class CentralDifferences:
    """Central differences at ``±h`` only, per direction: the cheap first look of fast mode."""

    values: np.ndarray
    """``(L(h) - L(-h)) / 2h`` along each direction (NaN where not finite)."""
    curvature: np.ndarray
    """``|L(h) - 2 L(0) + L(-h)| / h``: O(h) where smooth, the jump in slope at a kink within ``h``."""
    rounding: float
    """``16 eps scale / h``, the rounding bound of :func:`richardson` at the same center."""


def central_differences(
    losses: BatchedLoss, name: str, directions: Sequence[np.ndarray], step: float, dtype: str
) -> CentralDifferences:
    """Central differences along each direction at ``±h``: one stack of ``1 + 2k`` losses.

    The same points as the ``±h`` rows of :func:`directional_derivatives`
    (and the same center first), without the ``±2h`` rows.
    """
    count = len(directions)
    steps = np.array([0.0] + [step, -step] * count)
    which = np.array([0] + [index for index in range(count) for _ in range(2)])
    totals, scales = losses(name, Perturbations.along_directions(np.stack(directions), which, steps))
    plus, minus = totals[1:].reshape(count, 2).T
    return _at_plus_and_minus(plus, minus, float(totals[0]), float(scales[0]), step, dtype)


def _at_plus_and_minus(
    plus: np.ndarray, minus: np.ndarray, center: float, scale: float, step: float, dtype: str
) -> CentralDifferences:
    """Central differences and curvatures from the losses at ``±h`` along each direction and at the center."""
    with np.errstate(invalid="ignore", over="ignore"):
        values = (plus - minus) / (2 * step)
        curvature = np.abs(plus - 2 * center + minus) / step
    bad = ~(np.isfinite(values) & np.isfinite(curvature))
    rounding = float(16.0 * EPSILON[dtype] * scale / step)
    return CentralDifferences(np.where(bad, np.nan, values), np.where(bad, np.inf, curvature), rounding)


def joint_central_differences(
    loss: Loss, values: dict[str, Any], directions: Sequence[dict[str, np.ndarray]], step: float, dtype: str
) -> CentralDifferences:
    """Central differences at ``±h`` along directions through several inputs at once: ``1 + 2k`` losses.

    Along each direction the inputs it names move together, each along its
    own part, so the estimate is of ``sum_i <g_i, u_i>``: one number for the
    whole gradient, where :func:`central_differences` gives one per
    direction of one input.
    """
    center, scale = loss(values)
    found = []
    for direction in directions:
        moved = []
        for sign in (1.0, -1.0):
            shifted = dict(values)
            for name, part in direction.items():
                # One array per input moved: the step times the direction, then the point added in place;
                # aligned and frozen, so the forward pass can take it over without a copy.
                moved_input = np.multiply(part, sign * step, out=aligned_empty(np.shape(part)))
                moved_input += np.asarray(values[name], dtype=np.float64)
                moved_input.flags.writeable = False
                shifted[name] = moved_input
            moved.append(loss(shifted)[0])
        found.append(moved)
    plus, minus = np.array(found, dtype=np.float64).reshape(-1, 2).T
    return _at_plus_and_minus(plus, minus, center, scale, step, dtype)


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


class _ElementSweep:
    """One input's gradient, filled group by group: which flat elements each group moves, and by how much."""

    def __init__(self, losses: BatchedLoss, name: str, base: np.ndarray, scale: np.ndarray, symmetric: bool) -> None:
        self.losses = losses
        self.name = name
        self.shape = base.shape
        self.groups = element_directions(base.shape, symmetric)
        self.scale = scale.reshape(-1)
        strides = np.array(
            [int(np.prod(base.shape[i + 1 :], dtype=np.int64)) for i in range(base.ndim)], dtype=np.int64
        )
        self.members = [[int(np.dot(index, strides)) if index else 0 for index in group] for group in self.groups]
        self.weights = [0.5 if len(group) == 2 else 1.0 for group in self.groups]
        self.gradient = np.full(base.shape, np.nan)
        self.error = np.full(base.shape, np.inf)
        #: Groups per stack of perturbations: four rows each in the careful pass.
        self.per_batch = max(1, BATCH_FLOATS // (4 * max(base.size, 1)))

    def batches(self, groups: list[int]) -> list[list[int]]:
        """``groups`` cut into stacks of :attr:`per_batch`."""
        return [groups[start : start + self.per_batch] for start in range(0, len(groups), self.per_batch)]

    def evaluate(self, chosen: list[int], offsets: tuple[float, ...]) -> list[np.ndarray]:
        """Losses at every offset (in units of the element's scale) along each chosen group's direction."""
        rows, elements, amounts = [], [], []
        for block, offset in enumerate(offsets):
            for position, group in enumerate(chosen):
                for element in self.members[group]:
                    rows.append(block * len(chosen) + position)
                    elements.append(element)
                    amounts.append(offset * self.weights[group] * self.scale[element])
        stack = Perturbations.sparse(
            self.shape, np.asarray(rows), np.asarray(elements), np.asarray(amounts), len(offsets) * len(chosen)
        )
        totals, _ = self.losses(self.name, stack)
        return [totals[i * len(chosen) : (i + 1) * len(chosen)] for i in range(len(offsets))]

    def store(self, chosen: list[int], estimate: np.ndarray, bound: np.ndarray) -> None:
        """Directional estimates (and bounds) along the chosen groups, as gradient entries."""
        for position, group in enumerate(chosen):
            # d/dt L(x + t * direction) = sum_g weight * scale * grad[g]; for a symmetric
            # pair both gradient entries share the value, so divide by the scale once.
            divisor = self.scale[self.members[group][0]]
            for index in self.groups[group]:
                self.gradient[index] = estimate[position] / divisor
                self.error[index] = bound[position] / divisor

    def accepted(self, accept: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> list[bool]:
        """Per group, whether ``accept`` takes the estimate stored for it so far."""
        verdicts = np.asarray(accept(self.gradient, self.error), dtype=bool).reshape(-1)
        return [bool(verdicts[members[0]]) for members in self.members]


def _forward_pass(sweep: _ElementSweep, center: float, center_scale: float, dtype: str) -> int:
    """One forward difference per group, stored with its rounding bound; returns the evaluations.

    The step balances the O(h) truncation against rounding (sqrt of machine
    epsilon). It confirms a right gradient at half the cost of central
    differences; anything it cannot confirm gets the careful pass.
    """
    quick = math.sqrt(EPSILON[dtype])
    rounding = 4.0 * EPSILON[dtype] * center_scale / quick
    evaluations = 0
    for chosen in sweep.batches(list(range(len(sweep.groups)))):
        (moved,) = sweep.evaluate(chosen, (quick,))
        evaluations += len(chosen)
        with np.errstate(invalid="ignore", over="ignore"):
            sweep.store(chosen, (moved - center) / quick, np.full(len(chosen), rounding))
    return evaluations


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
    """The whole gradient by central differences, with a per-element error bound, and the evaluations it took.

    Each element's perturbations go to ``losses`` as rows of sparse stacks,
    so a loss that evaluates a stack in one call (see
    :meth:`gradcheck.harness.Harness.losses`) does the whole gradient in a
    few calls. ``scale`` is each element's step unit (the step is relative
    to it). With ``accept``, a first pass takes one forward difference per
    element and only the elements ``accept(estimate, error)`` rejects get
    central differences at two steps, Richardson extrapolation and the kink
    detector; without it every element does. For symmetric inputs each
    off-diagonal pair is perturbed by half a step each, so the estimate is
    the symmetric part of the gradient.
    """
    base = np.asarray(base, dtype=np.float64)
    sweep = _ElementSweep(losses, name, base, scale, symmetric)
    center, center_scale = losses(name, Perturbations.from_dense(np.zeros((1, *base.shape))))
    evaluations = 1
    refine = list(range(len(sweep.groups)))
    if accept is not None:
        evaluations += _forward_pass(sweep, center[0], center_scale[0], dtype)
        accepted = sweep.accepted(accept)
        refine = [group for group in refine if not accepted[group]]
    for chosen in sweep.batches(refine):
        plus1, minus1, plus2, minus2 = sweep.evaluate(chosen, (step, -step, 2 * step, -2 * step))
        evaluations += 4 * len(chosen)
        estimate, bound = richardson(center[0], center_scale[0], plus1, minus1, plus2, minus2, step, dtype)
        sweep.store(chosen, estimate, bound)
    return sweep.gradient, sweep.error, evaluations
