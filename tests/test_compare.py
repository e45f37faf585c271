"""Judging and naming the likely bug: numpy in, verdicts out (no TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest

from gradcheck import compare


def test_elementwise_reports_worst_element() -> None:
    expected = np.arange(12.0).reshape(3, 4)
    got = expected.copy()
    got[2, 1] += 0.5
    result = compare.compare_elementwise(got, expected, compare.tolerance("float64", "native"))
    assert not result.ok
    assert result.worst_index == (2, 1)
    assert result.max_abs_error == pytest.approx(0.5)
    assert result.max_rel_error == pytest.approx(0.5 / 11.0)
    assert (result.mismatched, result.total) == (1, 12)


def test_elementwise_tolerates_rounding_and_respects_mask() -> None:
    expected = np.array([1.0, 2.0, np.nan, 4.0])
    got = expected * (1 + 1e-12)
    got[2] = 7.0
    mask = np.isfinite(expected)
    result = compare.compare_elementwise(got, expected, compare.tolerance("float64", "native"), mask=mask)
    assert result.ok and result.total == 3


def test_elementwise_noise_floor_for_cancelled_sums() -> None:
    expected = np.array([1000.0, 1e-9])
    got = np.array([1000.0, 1e-9 + 1e-6])  # rounding noise far below the tensor's scale
    assert compare.compare_elementwise(got, expected, compare.tolerance("float64", "native")).ok


def test_tolerances_by_dtype_and_overrides() -> None:
    assert compare.tolerance("float64", "native").rtol < compare.tolerance("float32", "native").rtol
    assert compare.tolerance("float32", "numeric", rtol=0.5).rtol == 0.5
    assert compare.tolerance("float16", "numeric", atol=0.25).atol == 0.25


def test_projection_judges_with_finite_difference_error() -> None:
    gradient = np.array([1.0, 2.0, 3.0])
    direction = np.array([0.5, -1.0, 2.0])
    exact = float(gradient @ direction)
    tol = compare.tolerance("float64", "numeric")
    assert compare.compare_projection(gradient, direction, exact + 1e-9, 1e-8, tol).ok
    wrong = compare.compare_projection(gradient, direction, exact + 1.0, 1e-8, tol)
    assert not wrong.ok and wrong.conclusive
    noisy = compare.compare_projection(gradient, direction, exact + 1.0, 5.0, tol)
    assert not noisy.conclusive


def test_heat_map_reduces_high_ranks_to_two_axes() -> None:
    custom = np.zeros((2, 5, 3))
    reference = np.zeros((2, 5, 3))
    custom[1, 4, 0] = 1.0
    heat = compare.heat_map(custom, reference)
    assert heat is not None
    assert heat.axes == (1, 2)
    assert heat.difference[4][0] == 1.0
    assert compare.heat_map(np.zeros(()), np.zeros(())) is None


def _whole_array_comparison(got, expected, tol, error=None, mask=None) -> compare.Comparison:
    """The comparison written with whole-array temporaries: what the block-by-block one must equal."""
    whole = mask is None or bool(mask.all())
    with np.errstate(invalid="ignore", over="ignore"):
        difference = np.abs(got - expected) if whole else np.where(mask, np.abs(got - expected), 0.0)
        size = np.abs(expected)
        magnitude = float(np.max(size if whole else np.where(mask, size, 0.0), initial=0.0))
        bound = tol.atol + tol.rtol * size + tol.rtol * compare.NOISE_FLOOR * magnitude
        if error is not None:
            bound = bound + error
        bad = ~(difference <= bound) if whole else mask & ~(difference <= bound)
    worst = int(np.argmax(difference if whole else np.where(mask, difference, -1.0)))
    max_abs = float(difference.reshape(-1)[worst])
    return compare.Comparison(
        ok=not bad.any(),
        max_abs_error=max_abs,
        max_rel_error=max_abs / magnitude if magnitude > 0 else (0.0 if max_abs == 0 else None),
        worst_index=tuple(int(i) for i in np.unravel_index(worst, expected.shape)) if bad.any() else None,
        mismatched=int(np.count_nonzero(bad)),
        total=int(expected.size) if whole else int(np.count_nonzero(mask)),
    )


@pytest.mark.parametrize("trial", range(24))
def test_block_by_block_comparison_equals_the_whole_array_one(trial: int) -> None:
    rng = np.random.default_rng(trial)
    shape = [(3 * compare.BLOCK + 17,), (5, compare.BLOCK // 2 + 3), (compare.BLOCK,), (7,)][trial % 4]
    expected = rng.standard_normal(shape)
    got = expected + rng.standard_normal(shape) * 10.0 ** rng.uniform(-12, -2)
    flat = expected.reshape(-1)
    if trial % 3 == 0:  # NaNs in later blocks than the largest difference: the first NaN is the worst
        flat[rng.integers(0, flat.size, size=2)] = np.nan
    if trial % 5 == 0:  # ties: the first of the equal largest differences is the worst
        got.reshape(-1)[[1, flat.size - 1]] = flat[[1, flat.size - 1]] + 3.0
    mask = None if trial % 2 else rng.random(shape) < 0.7
    error = None if trial % 4 < 2 else np.abs(rng.standard_normal(shape)) * 1e-6
    tol = compare.tolerance("float64", "native")
    assert repr(compare.compare_elementwise(got, expected, tol, error, mask)) == repr(
        _whole_array_comparison(got, expected, tol, error, mask)
    )
