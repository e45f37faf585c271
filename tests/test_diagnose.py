"""The pure hints of check/diagnose: numpy only, no TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from gradcheck.checking import diagnose


@pytest.mark.parametrize(
    ("transform", "fragment"),
    [
        (lambda g, r: -r, "wrong sign"),
        (lambda g, r: 2.0 * r, "2 times"),
        (lambda g, r: np.zeros_like(r), "gradient is zero"),
        (lambda g, r: r.T, "transpose of the expected one"),
        (lambda g, r: g, "ignores the upstream"),
    ],
)
def test_value_hints(transform, fragment: str) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((4, 4))
    with_ones = rng.standard_normal((4, 4))
    got = transform(with_ones, reference)
    assert fragment in (diagnose.value_hint(got, reference, with_ones) or "")


def test_value_hint_is_silent_for_unrecognised_errors() -> None:
    rng = np.random.default_rng(1)
    assert diagnose.value_hint(rng.standard_normal((3, 5)), rng.standard_normal((3, 5))) is None


def test_zero_reference_suggests_reference_none() -> None:
    hint = diagnose.value_hint(np.ones(4), np.zeros(4))
    assert hint is not None and 'reference = "none"' in hint


def test_swap_hint_by_value() -> None:
    a, b = np.arange(4.0).reshape(2, 2), np.arange(4.0, 8.0).reshape(2, 2)
    hints = diagnose.swap_hint({"A": b, "W": a}, {"A": a, "W": b})
    assert "swapped" in hints["A"] and "swapped" in hints["W"]
    assert diagnose.swap_hint({"A": a, "W": b}, {"A": a, "W": b}) == {}


@pytest.mark.parametrize(
    ("got", "expected", "others", "fragment"),
    [
        ((4, 3), (8, 4), {"W": ((4, 3), (8, 4))}, "look swapped"),
        ((4, 8), (8, 4), {}, "transposed shape"),
        ((), (3,), {}, "scalar gradient"),
        ((8, 3), (3,), {}, "broadcast axis 0"),
        ((8, 3), (1, 3), {}, "broadcast axis 0"),
        ((2, 8, 3), (3,), {}, "broadcast axes 0, 1"),
    ],
)
def test_shape_hints(got, expected, others, fragment: str) -> None:  # type: ignore[no-untyped-def]
    returned = {name: back for name, (_, back) in others.items()}
    inputs = {"x": expected, **{name: shape for name, (shape, _) in others.items()}}
    returned["x"] = got
    hint = diagnose.shape_hint("x", got, expected, returned, inputs)
    assert hint is not None and fragment in hint
