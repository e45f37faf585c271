"""Seeded draws: the generator of one function's draw, an array drawn as its spec says, the symmetric part."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

from gradcheck import probing
from gradcheck.arrays import standard_normal
from gradcheck.dtypes import COMPLEX_DTYPES

if TYPE_CHECKING:
    from gradcheck.inputs import TensorSpec


def subject_rng(seed: int, name: str, draw: int = 0) -> np.random.Generator:
    """The generator for one function's ``draw``-th set of inputs.

    Seeded from the run's seed and the function's name only, so a function
    gets the same tensors whichever other functions run before it.
    """
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8")), draw])


def draw_tensor(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """One array drawn as ``spec`` says, in float64 (or the integer dtype)."""
    shape = spec.shape
    if spec.dtype in COMPLEX_DTYPES:
        return probing.complex_values(rng, shape).astype(spec.dtype)
    if spec.distribution == "integer":
        smallest = int(spec.low) if spec.low is not None else 0
        largest = int(spec.high) if spec.high is not None else 3
        return rng.integers(smallest, max(largest, smallest + 1), size=shape).astype(spec.dtype)
    if spec.distribution == "uniform":
        # The config refuses a uniform distribution without both bounds (config.parse_input).
        assert spec.low is not None and spec.high is not None
        values = rng.uniform(spec.low, spec.high, size=shape)
    elif spec.distribution == "positive":
        low = spec.low if spec.low is not None else 0.5
        high = spec.high if spec.high is not None else max(2.0, low * 4)
        values = rng.uniform(low, high, size=shape)
    elif spec.distribution == "spd":
        n = shape[-1]
        factor = rng.standard_normal(size=shape)
        values = np.matmul(factor, np.swapaxes(factor, -1, -2)) / n + np.eye(n)
    else:
        values = standard_normal(rng, shape)
    return np.asarray(values, dtype=np.float64)


def symmetrize(array: np.ndarray) -> np.ndarray:
    """The symmetric part over the last two axes."""
    return 0.5 * (array + np.swapaxes(array, -1, -2))
