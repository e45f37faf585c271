"""Block-wise sums and aligned arrays: the same floats as numpy's whole-array ones (no TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest

from gradcheck import arrays

SIZES = [1, 7, arrays.BLOCK, arrays.BLOCK + 1, 3 * arrays.BLOCK + 5, 1_000_003]


@pytest.mark.parametrize("size", SIZES)
def test_product_sums_are_numpys_sums_of_the_whole_product(size: int) -> None:
    rng = np.random.default_rng(size)
    first = rng.standard_normal(size) * 10.0 ** rng.uniform(-6, 6, size)
    second = rng.standard_normal(size)
    products = first * second
    assert arrays.product_sums(first, second) == (float(np.sum(products)), float(np.sum(np.abs(products))))


@pytest.mark.parametrize("size", SIZES)
def test_projection_sums_are_numpys_sums_of_the_whole_arrays(size: int) -> None:
    rng = np.random.default_rng(size + 1)
    gradient, direction = rng.standard_normal((2, size)) * 10.0 ** rng.uniform(-3, 3)
    products = gradient * direction
    expected = (float(np.sum(products)), float(np.sum(np.square(products))), float(np.sum(np.square(direction))))
    assert arrays.projection_sums(gradient, direction) == expected


def test_block_sums_keep_numpys_order_for_many_dimensions_and_fall_back_elsewhere() -> None:
    rng = np.random.default_rng(3)
    cube = rng.standard_normal((3, 211, 307))
    other = rng.standard_normal((3, 211, 307))
    assert arrays.blockwise(cube, other)
    assert arrays.product_sums(cube, other)[0] == float(np.sum(cube * other))
    # Transposed and float32 arrays are summed the plain way, in numpy's order for them.
    assert not arrays.blockwise(cube.T, other.T) and not arrays.blockwise(cube.astype(np.float32), other)
    assert arrays.product_sums(cube.T, other.T)[0] == float(np.sum(cube.T * other.T))


def test_a_nan_anywhere_makes_the_sums_nan() -> None:
    first = np.ones(3 * arrays.BLOCK)
    first[-1] = np.nan
    assert all(np.isnan(s) for s in arrays.product_sums(first, np.ones_like(first)))


@pytest.mark.parametrize("shape", [(5,), (1000, 3), (arrays.BLOCK + 1,)])
def test_aligned_arrays_are_aligned_and_draws_into_them_are_the_same_numbers(shape: tuple[int, ...]) -> None:
    assert arrays.aligned_empty(shape).ctypes.data % arrays.ALIGNMENT == 0
    drawn = arrays.standard_normal(np.random.default_rng(9), shape)
    assert drawn.shape == shape
    assert np.array_equal(drawn, np.random.default_rng(9).standard_normal(size=shape))
    if drawn.size > arrays.BLOCK:
        assert drawn.ctypes.data % arrays.ALIGNMENT == 0


@pytest.mark.parametrize("size", SIZES)
def test_scaling_by_magnitude_in_place_gives_the_products_with_a_whole_scale_array(size: int) -> None:
    rng = np.random.default_rng(size + 2)
    values = rng.standard_normal(size) * 10.0 ** rng.uniform(-2, 2, size)
    values[0] = np.nan
    direction = rng.standard_normal(size)
    expected = direction * np.maximum(1.0, np.abs(values))
    scaled = direction.copy()
    done = arrays.scale_by_magnitude(scaled, values)
    assert done == (size > arrays.BLOCK)
    assert np.array_equal(scaled, expected if done else direction, equal_nan=True)
