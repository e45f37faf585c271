"""The functions larq's smooth sign gradients stand for, as their papers give them (for larq_proxies.toml)."""

import tensorflow as tf


def approx_sign(x):
    """Bi-Real Net's ApproxSign: 2x - x|x| on [-1, 1], whose derivative is 2 - 2|x| there and 0 outside."""
    x = tf.clip_by_value(x, -1.0, 1.0)
    return 2.0 * x - x * tf.abs(x)


def swish_sign(x, beta=5.0):
    """BNN+'s SwishSign: 2 sigmoid(beta x) (1 + beta x (1 - sigmoid(beta x))) - 1."""
    s = tf.sigmoid(beta * x)
    return 2.0 * s * (1.0 + beta * x * (1.0 - s)) - 1.0
