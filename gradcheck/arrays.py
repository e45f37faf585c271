"""numpy for arrays of millions of floats: block-wise sums, bit for bit as numpy's, and aligned arrays.

``np.sum(u * o)`` over a million floats makes a product array the size of
the inputs and reads it back from memory, often through fresh pages. Summed
block by block, each block's products stay in the cache. The blocks follow
numpy's own pairwise summation tree (halves rounded down to a multiple of
eight, as ``pairwise_sum`` in numpy's ``loops_utils.h.src`` splits them), and
numpy sums each block, so every sum is the very float that ``np.sum`` of the
whole product array gives: a loss, and with it every finite difference, is
the same to the last bit either way.

:func:`aligned_empty` makes arrays that TensorFlow takes over without a copy
(:func:`gradcheck._tf.adopt`), for draws and perturbed inputs of that size.

numpy only, tested without TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Elements per block: a few temporaries of this many float64 fit in a core's L2 cache. Arrays up to this
#: size are made and summed the plain way.
BLOCK = 1 << 15

#: Bytes: TensorFlow copies a numpy array it is handed unless its data is aligned to this.
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float64 array that :func:`gradcheck._tf.adopt` hands to TensorFlow without a copy."""
    size = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(size * 8 + ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset : offset + size * 8].view(np.float64).reshape(shape)


def standard_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """``rng.standard_normal(size=shape)``, the same numbers, in an aligned array where the draw is big."""
    if int(np.prod(shape, dtype=np.int64)) <= BLOCK:
        return rng.standard_normal(size=shape)
    return rng.standard_normal(out=aligned_empty(shape))


def blockwise(*arrays: np.ndarray) -> bool:
    """Whether :func:`pairwise` applies: C-contiguous float64 arrays of one shape, bigger than one block
    (numpy sums others in an order of its own, or in another dtype, and small ones gain nothing)."""
    first = arrays[0]
    return (
        isinstance(first, np.ndarray)
        and first.size > BLOCK
        and all(isinstance(a, np.ndarray) and a.dtype == np.float64 and a.flags.c_contiguous for a in arrays)
        and all(a.shape == first.shape for a in arrays)
    )


def scale_by_magnitude(direction: np.ndarray, values: np.ndarray) -> bool:
    """``direction *= max(1, |values|)`` in place, block by block, without a values-sized scale array (the
    same products); False, leaving ``direction`` as it is, where :func:`blockwise` does not apply."""
    if not blockwise(direction, values) or not direction.flags.writeable:
        return False
    flat_direction, flat_values = direction.reshape(-1), values.reshape(-1)
    for start in range(0, flat_values.size, BLOCK):
        span = slice(start, start + BLOCK)
        scale = np.abs(flat_values[span])
        flat_direction[span] *= np.maximum(scale, 1.0, out=scale)
    return True


def pairwise(size: int, block_sums: Callable[[slice], tuple[float, ...]]) -> tuple[float, ...]:
    """Several sums over ``size`` elements along numpy's pairwise tree, ``block_sums(span)`` giving each
    one's sum over a block (with ``np.sum``, on the flattened arrays)."""
    if size <= BLOCK:
        return block_sums(slice(0, size))
    half = size // 2
    half -= half % 8
    left = pairwise(half, block_sums)
    right = pairwise(size - half, lambda span: block_sums(slice(span.start + half, span.stop + half)))
    return tuple(a + b for a, b in zip(left, right))


def product_sums(first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """``sum(first * second)`` and ``sum(|first * second|)``, each as numpy sums the whole product."""
    if not blockwise(first, second):
        products = np.multiply(first, second)
        total = float(np.sum(products))
        if isinstance(products, np.ndarray):
            return total, float(np.sum(np.abs(products, out=products)))
        return total, float(abs(products))
    flat_first, flat_second = first.reshape(-1), second.reshape(-1)

    def block_sums(span: slice) -> tuple[float, float]:
        products = np.multiply(flat_first[span], flat_second[span])
        total = float(np.sum(products))
        return total, float(np.sum(np.abs(products, out=products)))

    total, absolute = pairwise(first.size, block_sums)
    return total, absolute


def projection_sums(gradient: np.ndarray, direction: np.ndarray) -> tuple[float, float, float]:
    """``sum(g * u)``, ``sum((g * u)^2)`` and ``sum(u^2)``, each as numpy sums the whole array."""
    if not blockwise(gradient, direction):
        products = np.multiply(gradient, direction)
        return float(np.sum(products)), float(np.sum(np.square(products))), float(np.sum(np.square(direction)))
    flat_gradient, flat_direction = gradient.reshape(-1), direction.reshape(-1)

    def block_sums(span: slice) -> tuple[float, float, float]:
        products = np.multiply(flat_gradient[span], flat_direction[span])
        projected = float(np.sum(products))
        squared = float(np.sum(np.square(products, out=products)))
        return projected, squared, float(np.sum(np.square(flat_direction[span], out=products)))

    projected, squared, direction_squared = pairwise(gradient.size, block_sums)
    return projected, squared, direction_squared
