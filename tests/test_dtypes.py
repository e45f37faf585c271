"""The dtypes' facts, written as numbers in gradcheck.dtypes, against what numpy (and ml_dtypes, TensorFlow) say."""

from __future__ import annotations

import numpy as np
import pytest

from gradcheck import dtypes


def _finfo(name: str) -> np.finfo:
    """numpy's facts about a float dtype; bfloat16's from ml_dtypes, the package TensorFlow takes it from."""
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(np.dtype(name))


@pytest.mark.parametrize("name", dtypes.FLOAT_DTYPES)
def test_each_epsilon_is_the_one_numpy_gives(name: str) -> None:
    assert dtypes.EPSILON[name] == float(_finfo(name).eps)


def test_precision_runs_from_the_coarsest_to_the_finest() -> None:
    assert dtypes.PRECISION == ("bfloat16", "float16", "float32", "float64")
    resolutions = [float(_finfo(name).resolution) for name in dtypes.PRECISION]
    assert resolutions == sorted(resolutions, reverse=True)
    assert dtypes.FLOAT_DTYPES[0] == "float64"


@pytest.mark.parametrize("name", dtypes.COMPLEX_DTYPES)
def test_a_complex_dtype_is_made_of_its_parts(name: str) -> None:
    assert np.finfo(np.dtype(name)).dtype == np.dtype(dtypes.COMPLEX_PARTS[name])
    assert np.dtype(name).itemsize == 2 * np.dtype(dtypes.COMPLEX_PARTS[name]).itemsize


def test_the_complex_dtypes_run_from_the_coarsest() -> None:
    parts = [dtypes.COMPLEX_PARTS[name] for name in dtypes.COMPLEX_DTYPES]
    assert [dtypes.PRECISION.index(part) for part in parts] == sorted(dtypes.PRECISION.index(part) for part in parts)


@pytest.mark.parametrize("name", dtypes.INTEGER_DTYPES)
def test_integer_dtypes_are_numpy_integers(name: str) -> None:
    assert np.dtype(name).kind == "i"


def test_the_integer_default_is_an_integer_dtype() -> None:
    assert dtypes.INTEGER_DEFAULT in dtypes.INTEGER_DTYPES


@pytest.mark.parametrize("facts", dtypes.FLOATS, ids=lambda facts: facts.name)
def test_default_tolerances_are_above_rounding_and_tighter_against_native(facts: dtypes.FloatDtype) -> None:
    assert facts.epsilon < facts.native_rtol <= facts.numeric_rtol
    assert 0 < facts.native_atol <= facts.numeric_atol


def test_the_names_are_tensorflows() -> None:
    tf = pytest.importorskip("tensorflow")
    for name in (*dtypes.FLOAT_DTYPES, *dtypes.COMPLEX_DTYPES, *dtypes.INTEGER_DTYPES):
        assert tf.as_dtype(name).name == name
    for name in dtypes.FLOAT_DTYPES:
        assert tf.as_dtype(name).is_floating
    for name, part in dtypes.COMPLEX_PARTS.items():
        assert tf.as_dtype(name).real_dtype.name == part


def test_narrowest_is_the_least_precise_and_unknown_names_count_as_float64() -> None:
    assert dtypes.narrowest("float64", "float16", "float32") == "float16"
    assert dtypes.narrowest("bfloat16", "float16") == "bfloat16"
    assert dtypes.narrowest("int32", "float64") == "float64"
    assert dtypes.narrowest("int32") == "int32"


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("float64", "complex128"), ("float32", "complex64"), ("float16", "complex64"), ("bfloat16", "complex64")],
)
def test_complex_holding_keeps_the_floats_precision(dtype: str, expected: str) -> None:
    assert dtypes.complex_holding(dtype) == expected
