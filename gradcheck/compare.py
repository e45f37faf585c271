"""Tolerances per dtype; judging gradients against references; heat maps of the difference.

Naming the likely bug is :mod:`gradcheck.checking.diagnose`'s job.

numpy only. Everything here takes arrays that :mod:`gradcheck.harness` and
:mod:`gradcheck.finite_differences` computed and returns plain verdicts, so it
is tested without TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcheck.arrays import BLOCK
from gradcheck.dtypes import FLOAT
from gradcheck.results import HeatMap


@dataclass(frozen=True)
class Tolerance:
    """``|got - expected| <= atol + rtol * |expected|``, element-wise."""

    rtol: float
    atol: float


#: Fraction of the largest reference magnitude below which element-wise
#: differences count as rounding noise: sums that cancel to near zero carry
#: rounding error proportional to their terms, not to their result.
NOISE_FLOOR = 0.1


def tolerance(dtype: str, against: str, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The tolerance for comparing a ``dtype`` gradient with ``native`` or ``numeric``."""
    facts = FLOAT.get(dtype, FLOAT["float32"])
    if against == "native":
        base = Tolerance(rtol=facts.native_rtol, atol=facts.native_atol)
    else:
        base = Tolerance(rtol=facts.numeric_rtol, atol=facts.numeric_atol)
    return Tolerance(rtol=base.rtol if rtol is None else rtol, atol=base.atol if atol is None else atol)


@dataclass(frozen=True)
class Comparison:
    """Element-wise agreement of a gradient with a reference."""

    ok: bool
    """True when every compared element is within tolerance."""
    max_abs_error: float
    """Largest absolute difference."""
    max_rel_error: float | None
    """Largest absolute difference over the largest reference magnitude (None if that is 0)."""
    worst_index: tuple[int, ...] | None
    """Where the largest difference is."""
    mismatched: int
    """How many elements are out of tolerance."""
    total: int
    """How many elements were compared."""

    def errors(self) -> dict[str, Any]:
        """The largest errors and where, as a :class:`Problem` records them."""
        return {
            "max_abs_error": self.max_abs_error,
            "max_rel_error": self.max_rel_error,
            "worst_index": self.worst_index,
        }


def _bound(expected: np.ndarray, tol: Tolerance, floor: float, expected_error: np.ndarray | None) -> np.ndarray:
    """``atol + rtol |e| + floor (+ expected_error)`` for one block, added in that order, in place."""
    bound = np.abs(expected)
    bound *= tol.rtol
    bound += tol.atol
    bound += floor
    if expected_error is not None:
        bound += expected_error
    return bound


def compare_elementwise(
    got: np.ndarray,
    expected: np.ndarray,
    tol: Tolerance,
    expected_error: np.ndarray | None = None,
    mask: np.ndarray | None = None,
) -> Comparison:
    """Compare two gradients of the same shape; ``mask`` selects the elements to compare.

    Block by block (:data:`gradcheck.arrays.BLOCK` elements: whole-array temporaries of millions of floats
    cost a trip through memory and fresh pages each), element for element as whole arrays would: the bound is
    ``atol + rtol |e| + rtol floor max|e|`` (plus ``expected_error``), added
    in that order, and the worst element is the first largest difference
    (the first NaN if there is one), as ``np.argmax`` finds it.
    """
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if mask is not None and bool(np.all(mask)):
        mask = None  # every element compared, the usual case
    total = int(expected.size) if mask is None else int(np.count_nonzero(mask))
    if total == 0:
        return Comparison(True, 0.0, 0.0, None, 0, 0)
    flat_got, flat_expected = got.reshape(-1), expected.reshape(-1)
    flat_error = None if expected_error is None else np.broadcast_to(expected_error, expected.shape).reshape(-1)
    flat_mask = None if mask is None else np.broadcast_to(mask, expected.shape).reshape(-1)
    blocks = [slice(start, start + BLOCK) for start in range(0, flat_expected.size, BLOCK)]

    def masked(block: slice, values: np.ndarray, fill: float) -> np.ndarray:
        return values if flat_mask is None else np.where(flat_mask[block], values, fill)

    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = float(np.max([np.max(masked(b, np.abs(flat_expected[b]), 0.0), initial=0.0) for b in blocks]))
        floor = tol.rtol * NOISE_FLOOR * magnitude
        mismatched = 0
        worst_flat, worst_rank, max_abs = 0, math.nan, 0.0
        for block in blocks:
            difference = np.subtract(flat_got[block], flat_expected[block])
            difference = masked(block, np.abs(difference, out=difference), 0.0)
            bound = _bound(flat_expected[block], tol, floor, None if flat_error is None else flat_error[block])
            bad = ~(difference <= bound)
            if flat_mask is not None:
                bad &= flat_mask[block]
            mismatched += int(np.count_nonzero(bad))
            ranked = masked(block, difference, -1.0)
            local = int(np.argmax(ranked))
            rank = float(ranked[local])
            if block.start == 0 or (not math.isnan(worst_rank) and (math.isnan(rank) or rank > worst_rank)):
                worst_flat, worst_rank, max_abs = block.start + local, rank, float(difference[local])
    worst = tuple(int(i) for i in np.unravel_index(worst_flat, expected.shape)) if expected.ndim else ()
    max_rel = max_abs / magnitude if magnitude > 0 else (0.0 if max_abs == 0 else None)
    return Comparison(
        ok=mismatched == 0,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        worst_index=worst if mismatched else None,
        mismatched=mismatched,
        total=total,
    )


@dataclass(frozen=True)
class ProjectionComparison:
    """Agreement of ``<gradient, direction>`` with a finite-difference directional derivative."""

    ok: bool
    """True when the two agree within tolerance."""
    conclusive: bool
    """False when the finite difference's own error is too large to judge by (a kink)."""
    projected: float
    """``<gradient, direction>``."""
    estimate: float
    """The finite-difference directional derivative."""
    abs_error: float
    """``|projected - estimate|``."""
    rel_error: float | None
    """``abs_error`` over the scale of the projection."""


#: A finite difference whose error bound exceeds this fraction of the
#: quantity it measures is not used to judge: a kink or a jump lies within
#: the step.
UNRELIABLE = 0.1


def euclidean_norm(array: np.ndarray) -> float:
    """The Euclidean norm, summed by numpy rather than BLAS: a multi-threaded BLAS dot competes with
    TensorFlow's threads for the cores (measured on 2 busy cores: 24 ms instead of 0.05 ms for 262,144 floats)."""
    return math.sqrt(float(np.sum(np.square(array))))


def compare_projection(
    gradient: np.ndarray, direction: np.ndarray, estimate: float, estimate_error: float, tol: Tolerance
) -> ProjectionComparison:
    """Judge ``<gradient, direction>`` against a directional finite difference.

    The scale of the comparison is the larger of the two values and of
    ``||gradient * direction||``, the typical size of the projection: a
    random direction can make the projection itself cancel to near zero.
    """
    gradient = np.asarray(gradient, dtype=np.float64)
    products = gradient * direction
    projected = float(np.sum(products))
    spread = euclidean_norm(products)
    if not math.isfinite(estimate):
        return ProjectionComparison(False, False, projected, estimate, math.inf, None)
    scale = max(abs(projected), abs(estimate), spread)
    abs_error = abs(projected - estimate)
    bound = tol.atol * euclidean_norm(direction) + tol.rtol * scale + estimate_error
    conclusive = estimate_error <= UNRELIABLE * max(scale, tol.atol)
    return ProjectionComparison(
        ok=abs_error <= bound,
        conclusive=conclusive,
        projected=projected,
        estimate=estimate,
        abs_error=abs_error,
        rel_error=abs_error / scale if scale > 0 else None,
    )


def heat_map(custom: np.ndarray, expected: np.ndarray) -> HeatMap | None:
    """The values of a value problem reduced to at most two axes, for pictures.

    Higher ranks keep their two largest axes, with the largest difference
    over the others, so a wrong gradient in any slice still shows.
    """
    custom = np.asarray(custom, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if custom.shape != expected.shape or custom.ndim == 0:
        return None
    difference = np.abs(custom - expected)
    axes = tuple(range(custom.ndim))
    if custom.ndim > 2:
        axes = tuple(sorted(sorted(axes, key=lambda a: -custom.shape[a])[:2]))
        others = tuple(a for a in range(custom.ndim) if a not in axes)
        picked = np.argmax(difference, axis=None)
        index = np.unravel_index(picked, custom.shape)
        slicer = tuple(slice(None) if a in axes else index[a] for a in range(custom.ndim))
        custom_view, expected_view = custom[slicer], expected[slicer]
        difference_view = np.max(difference, axis=others)
    else:
        custom_view, expected_view, difference_view = custom, expected, difference
    return HeatMap(
        custom=np.nan_to_num(custom_view).tolist(),
        reference=np.nan_to_num(expected_view).tolist(),
        difference=np.nan_to_num(difference_view).tolist(),
        axes=axes,
    )
