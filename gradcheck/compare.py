"""Tolerances per dtype; judging gradients against references; naming the likely bug.

numpy only. Everything here takes arrays that :mod:`gradcheck.numerics`
computed and returns plain verdicts, so it is tested without TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gradcheck.results import HeatMap


@dataclass(frozen=True)
class Tolerance:
    """``|got - expected| <= atol + rtol * |expected|``, element-wise."""

    rtol: float
    atol: float


# Native autodiff is exact up to rounding, so it is held to a tighter bound
# than finite differences, whose own error is estimated separately and added.
_NATIVE = {
    "float64": Tolerance(rtol=1e-6, atol=1e-9),
    "float32": Tolerance(rtol=1e-4, atol=1e-6),
    "float16": Tolerance(rtol=1e-2, atol=1e-3),
    "bfloat16": Tolerance(rtol=5e-2, atol=1e-2),
}
_NUMERIC = {
    "float64": Tolerance(rtol=1e-5, atol=1e-8),
    "float32": Tolerance(rtol=1e-2, atol=1e-4),
    "float16": Tolerance(rtol=5e-2, atol=1e-2),
    "bfloat16": Tolerance(rtol=1e-1, atol=5e-2),
}

#: Fraction of the largest reference magnitude below which element-wise
#: differences count as rounding noise: sums that cancel to near zero carry
#: rounding error proportional to their terms, not to their result.
NOISE_FLOOR = 0.1


def tolerance(dtype: str, reference: str, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The tolerance for comparing a ``dtype`` gradient with ``native`` or ``numeric``."""
    table = _NATIVE if reference == "native" else _NUMERIC
    base = table.get(dtype, table["float32"])
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


def compare_elementwise(
    got: np.ndarray,
    expected: np.ndarray,
    tol: Tolerance,
    expected_error: np.ndarray | None = None,
    mask: np.ndarray | None = None,
) -> Comparison:
    """Compare two gradients of the same shape; ``mask`` selects the elements to compare."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if mask is None:
        mask = np.ones(expected.shape, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        difference = np.where(mask, np.abs(got - expected), 0.0)
    magnitude = float(np.max(np.abs(np.where(mask, expected, 0.0)), initial=0.0))
    bound = tol.atol + tol.rtol * np.abs(expected) + tol.rtol * NOISE_FLOOR * magnitude
    if expected_error is not None:
        bound = bound + expected_error
    bad = mask & ~(difference <= bound)
    total = int(np.count_nonzero(mask))
    if total == 0:
        return Comparison(True, 0.0, 0.0, None, 0, 0)
    flat_worst = int(np.argmax(np.where(mask, difference, -1.0)))
    worst = tuple(int(i) for i in np.unravel_index(flat_worst, expected.shape)) if expected.ndim else ()
    max_abs = float(difference.reshape(-1)[flat_worst]) if expected.ndim else float(difference)
    max_rel = max_abs / magnitude if magnitude > 0 else (0.0 if max_abs == 0 else None)
    return Comparison(
        ok=not bool(bad.any()),
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        worst_index=worst if bad.any() else None,
        mismatched=int(np.count_nonzero(bad)),
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


def compare_projection(
    gradient: np.ndarray, direction: np.ndarray, estimate: float, estimate_error: float, tol: Tolerance
) -> ProjectionComparison:
    """Judge ``<gradient, direction>`` against a directional finite difference.

    The scale of the comparison is the larger of the two values and of
    ``||gradient * direction||``, the typical size of the projection: a
    random direction can make the projection itself cancel to near zero.
    """
    gradient = np.asarray(gradient, dtype=np.float64)
    projected = float(np.sum(gradient * direction))
    spread = float(np.linalg.norm((gradient * direction).reshape(-1)))
    if not math.isfinite(estimate):
        return ProjectionComparison(False, False, projected, estimate, math.inf, None)
    scale = max(abs(projected), abs(estimate), spread)
    abs_error = abs(projected - estimate)
    bound = tol.atol * float(np.linalg.norm(direction.reshape(-1))) + tol.rtol * scale + estimate_error
    conclusive = estimate_error <= UNRELIABLE * max(scale, tol.atol)
    return ProjectionComparison(
        ok=abs_error <= bound,
        conclusive=conclusive,
        projected=projected,
        estimate=estimate,
        abs_error=abs_error,
        rel_error=abs_error / scale if scale > 0 else None,
    )


# -- naming the likely bug ---------------------------------------------------------


def close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-3) -> bool:
    """Equal up to ``rtol`` in norm: for recognising patterns, not for verdicts."""
    if a.shape != b.shape:
        return False
    scale = max(float(np.linalg.norm(b.reshape(-1))), float(np.linalg.norm(a.reshape(-1))))
    if scale == 0:
        return True
    return float(np.linalg.norm((a - b).reshape(-1))) <= rtol * scale


def value_hint(
    got: np.ndarray,
    expected: np.ndarray,
    expected_with_ones: np.ndarray | None = None,
    pattern_rtol: float = 1e-3,
) -> str | None:
    """The likely bug behind a gradient that differs in value, where it is recognisable."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape or not np.all(np.isfinite(got)):
        return None
    got_norm = float(np.linalg.norm(got.reshape(-1)))
    expected_norm = float(np.linalg.norm(expected.reshape(-1)))
    if expected_norm == 0:
        if got_norm > 0:
            return (
                "the reference gradient is zero but this one is not: if a surrogate gradient "
                'is intended (straight-through, clipping), set reference = "none"'
            )
        return None
    if got_norm <= pattern_rtol * expected_norm:
        return "the gradient is zero: a missing term, or a stop_gradient in the backward function?"
    if expected_with_ones is not None and close(got, expected_with_ones, pattern_rtol):
        return "the gradient ignores the upstream gradient: missing multiply by dy?"
    factor = float(np.sum(got * expected) / np.sum(expected * expected))
    if close(got, factor * expected, pattern_rtol):
        if abs(factor + 1) <= pattern_rtol:
            return "wrong sign: the gradient is the negative of the expected one"
        return f"off by a constant factor: the gradient is {factor:.4g} times the expected one"
    square = got.ndim >= 2 and got.shape[-1] == got.shape[-2]
    if square and close(got, np.swapaxes(expected, -1, -2), pattern_rtol):
        return "the gradient is the transpose of the expected one: a missing or extra transpose?"
    return None


def swap_hint(
    grads: dict[str, np.ndarray], references: dict[str, np.ndarray], pattern_rtol: float = 1e-3
) -> dict[str, str]:
    """Inputs whose gradients look exchanged with another input's, by value."""
    hints: dict[str, str] = {}
    names = [n for n in grads if n in references]
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            a, b = grads[first], grads[second]
            if a.shape != references[second].shape or b.shape != references[first].shape:
                continue
            if close(a, references[second], pattern_rtol) and close(b, references[first], pattern_rtol):
                message = f"the gradients of {first} and {second} are swapped: return them in input order"
                hints[first] = message
                hints[second] = message
    return hints


def shape_hint(
    name: str,
    got: tuple[int | None, ...],
    expected: tuple[int, ...],
    returned_shapes: dict[str, tuple[int | None, ...] | None],
    input_shapes: dict[str, tuple[int, ...]],
) -> str | None:
    """The likely bug behind a gradient of the wrong shape."""
    for other, other_shape in input_shapes.items():
        if other == name or tuple(got) != tuple(other_shape):
            continue
        back = returned_shapes.get(other)
        if back is not None and tuple(back) == tuple(expected):
            return f"the gradients of {name} and {other} look swapped: each has the other's shape"
    if len(expected) == 2 and tuple(got) == tuple(reversed(expected)):
        return "the gradient has the transposed shape: a missing or extra transpose?"
    if tuple(got) == () and expected != ():
        return "a scalar gradient broadcasts silently in TensorFlow: the backward function reduced over all axes"
    axes = broadcast_axes(tuple(int(d) for d in got if d is not None), expected) if None not in got else None
    if axes:
        return (
            f"missing sum over the broadcast axis {axes[0]}"
            if len(axes) == 1
            else f"missing sum over the broadcast axes {', '.join(map(str, axes))}"
        ) + f": reduce_sum the gradient to the input's shape {list(expected)}"
    return None


def broadcast_axes(got: tuple[int, ...], expected: tuple[int, ...]) -> tuple[int, ...] | None:
    """Axes of ``got`` to sum over to reach ``expected``, if ``expected`` broadcasts to ``got``."""
    if len(got) < len(expected) or got == expected:
        return None
    lead = len(got) - len(expected)
    axes = list(range(lead))
    for i, (g, e) in enumerate(zip(got[lead:], expected)):
        if g == e:
            continue
        if e == 1:
            axes.append(lead + i)
            continue
        return None
    return tuple(axes) if axes else None


def heat_map(custom: np.ndarray, reference: np.ndarray) -> HeatMap | None:
    """The values of a value problem reduced to at most two axes, for pictures.

    Higher ranks keep their two largest axes, with the largest difference
    over the others, so a wrong gradient in any slice still shows.
    """
    custom = np.asarray(custom, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if custom.shape != reference.shape or custom.ndim == 0:
        return None
    difference = np.abs(custom - reference)
    axes = tuple(range(custom.ndim))
    if custom.ndim > 2:
        axes = tuple(sorted(sorted(axes, key=lambda a: -custom.shape[a])[:2]))
        others = tuple(a for a in range(custom.ndim) if a not in axes)
        picked = np.argmax(difference, axis=None)
        index = np.unravel_index(picked, custom.shape)
        slicer = tuple(slice(None) if a in axes else index[a] for a in range(custom.ndim))
        custom_view, reference_view = custom[slicer], reference[slicer]
        difference_view = np.max(difference, axis=others)
    else:
        custom_view, reference_view, difference_view = custom, reference, difference
    return HeatMap(
        custom=np.nan_to_num(custom_view).tolist(),
        reference=np.nan_to_num(reference_view).tolist(),
        difference=np.nan_to_num(difference_view).tolist(),
        axes=axes,
    )
