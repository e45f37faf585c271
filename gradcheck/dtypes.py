"""The dtypes gradcheck draws and differentiates in, each fact about them once.

Imports nothing, numpy included: like JAX's ``jax/_src/dtypes.py``, this is the
one place the rest asks. Names are TensorFlow's, which are numpy's too where
numpy has the dtype. bfloat16 has no numpy dtype, so every fact here is
written as a number, and ``tests/test_dtypes.py`` holds the others to what
numpy says (``np.finfo``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FloatDtype:
    """A float dtype inputs may be drawn in: its resolution and its default tolerances."""

    name: str
    """TensorFlow's name (numpy's too, bfloat16 aside)."""
    epsilon: float
    """Machine epsilon: the gap between 1 and the next larger float."""
    native_rtol: float
    """Default relative tolerance against native autodiff: tighter than against finite differences, since
    native autodiff is exact up to rounding and finite differences add their own estimated error."""
    native_atol: float
    """Default absolute tolerance against native autodiff."""
    numeric_rtol: float
    """Default relative tolerance against finite differences."""
    numeric_atol: float
    """Default absolute tolerance against finite differences."""


#: The float dtypes, the default first: the order of ``--dtype``'s choices.
FLOATS = (
    FloatDtype("float64", 2.0**-52, native_rtol=1e-6, native_atol=1e-9, numeric_rtol=1e-5, numeric_atol=1e-8),
    FloatDtype("float32", 2.0**-23, native_rtol=1e-4, native_atol=1e-6, numeric_rtol=1e-2, numeric_atol=1e-4),
    FloatDtype("float16", 2.0**-10, native_rtol=1e-2, native_atol=1e-3, numeric_rtol=5e-2, numeric_atol=1e-2),
    FloatDtype("bfloat16", 2.0**-7, native_rtol=5e-2, native_atol=1e-2, numeric_rtol=1e-1, numeric_atol=5e-2),
)
#: Each float dtype by its name.
FLOAT = {dtype.name: dtype for dtype in FLOATS}
#: The float dtypes' names: the inputs drawn in them are differentiated.
FLOAT_DTYPES = tuple(FLOAT)
#: Machine epsilon by dtype name.
EPSILON = {dtype.name: dtype.epsilon for dtype in FLOATS}
#: Float dtypes from the least to the most precise.
PRECISION = tuple(dtype.name for dtype in sorted(FLOATS, key=lambda dtype: dtype.epsilon, reverse=True))

#: A complex dtype -> the float dtype of its real and imaginary parts, as which it is drawn and perturbed.
COMPLEX_PARTS = {"complex64": "float32", "complex128": "float64"}
#: The complex dtypes' names, the least precise first.
COMPLEX_DTYPES = tuple(COMPLEX_PARTS)

#: The integer dtypes an input may be given; its values are not differentiated.
INTEGER_DTYPES = ("int32", "int64")
#: The dtype of integer inputs (labels, indices) where the config names none.
INTEGER_DEFAULT = "int32"


def narrowest(*dtypes: str) -> str:
    """The least precise of float ``dtypes`` (unknown names count as float64)."""
    return min(dtypes, key=lambda d: PRECISION.index(d) if d in PRECISION else len(PRECISION))


def complex_holding(dtype: str) -> str:
    """The complex dtype drawn beside ``dtype`` floats: the least precise whose parts are at least as precise."""
    return next(c for c in COMPLEX_DTYPES if PRECISION.index(COMPLEX_PARTS[c]) >= PRECISION.index(dtype))
