"""The loss a check differentiates, and its rounding scale, in the three places it is evaluated; a draw.

A :class:`Draw` is where a loss is evaluated: the values the forward pass
runs on and the upstream gradients that weigh its outputs. The loss at a
draw is ``sum_i <upstream_i, output_i>`` over the float
outputs of the forward pass, each upstream gradient weighing its output;
its rounding scale is ``sum_i sum |upstream_i * output_i|``, what the
rounding of the sum is measured against. It is evaluated at one point in
numpy (:func:`pairing`, bit for bit as ``np.sum`` of the products), at each
row of a stacked evaluation in TensorFlow (:func:`stacked`), and inside a
traced ``tf.vectorized_map`` (:func:`traced`). The three forms are kept
apart on purpose: each sums in its own order, and the finite differences
built on each must stay the same to the last bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcheck import _tf
from gradcheck.arrays import product_sums


@dataclass(frozen=True, eq=False)
class Draw:
    """The values a forward pass runs on and the upstream gradients, one per float output, of its loss."""

    values: dict[str, Any]
    """A leaf argument's or a variable's name -> a float64 (or integer) numpy array, or the constant itself."""
    upstreams: list[np.ndarray]
    centre: dict[str, Any] | None = None
    """For a perturbed point: the values of the draw it was moved from (a proxy's finite differences are
    taken around them); None for the draw itself."""

    def at(self, values: dict[str, Any]) -> Draw:
        """The same upstream gradients at other values (a perturbed point of the finite differences)."""
        return Draw(values, self.upstreams, self.values if self.centre is None else self.centre)


def pairing(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """``sum_i <weight_i, value_i>`` and ``sum_i |weight_i * value_i|`` over ``(weight, value)`` pairs, in order."""
    total = 0.0
    scale = 0.0
    for weight, value in pairs:
        part, part_scale = product_sums(weight, value)
        total += part
        scale += part_scale
    return total, scale


def stacked(outputs: list[Any], upstreams: list[Any], rows: int, scaled: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a stacked evaluation (each output with a new leading axis of ``rows``), the loss.

    Reduced inside TensorFlow as one matrix-vector product per output, so
    only a number per row comes back. With ``scaled``, the first row also
    gets its rounding scale (NaN for the others): callers only use the scale
    at the center, which comes first in its stack.
    """
    tf = _tf.tensorflow()
    total = tf.zeros([rows], dtype=tf.float64)
    scale = tf.zeros([1], dtype=tf.float64)
    for output, upstream in zip(outputs, upstreams):
        flat = tf.reshape(tf.cast(output, tf.float64), [rows, -1])
        weights = tf.reshape(upstream, [-1])
        total += tf.linalg.matvec(flat, weights)
        if scaled:
            scale += tf.linalg.matvec(tf.abs(flat[:1]), tf.abs(weights))
    scales = np.full(rows, np.nan)
    if scaled:
        scales[0] = scale.numpy()[0]
    return total.numpy(), scales


def traced(outputs: list[Any], upstreams: list[Any]) -> Any:
    """The loss and its rounding scale at one point, as a float64 tensor ``[loss, scale]``, inside a trace."""
    tf = _tf.tensorflow()
    products = [tf.cast(o, tf.float64) * tf.cast(u, tf.float64) for o, u in zip(outputs, upstreams)]
    total = tf.add_n([tf.reduce_sum(p) for p in products])
    scale = tf.add_n([tf.reduce_sum(tf.abs(p)) for p in products])
    return tf.stack([total, scale])
