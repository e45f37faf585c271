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
