"""Custom gradients with the mistakes people make; `gradcheck run` finds each one."""

import tensorflow as tf


@tf.custom_gradient
def matmul_missing_transpose(A, W):
    result = tf.matmul(A, W)

    def grad(dy):
        return tf.matmul(dy, W), tf.matmul(A, dy, transpose_a=True)  # W should be transposed

    return result, grad


@tf.custom_gradient
def matmul_swapped(A, W):
    result = tf.matmul(A, W)

    def grad(dy):
        grad_A = tf.matmul(dy, W, transpose_b=True)
        grad_W = tf.matmul(A, dy, transpose_a=True)
        return grad_W, grad_A  # returned in the wrong order

    return result, grad


@tf.custom_gradient
def matmul_one_missing(A, W):
    result = tf.matmul(A, W)

    def grad(dy):
        return tf.matmul(dy, W, transpose_b=True)  # no gradient for W

    return result, grad


@tf.custom_gradient
def bias_add_unsummed(x, b):
    def grad(dy):
        return dy, dy  # b's gradient must be summed over the batch axis

    return x + b, grad


@tf.custom_gradient
def square_wrong_sign(x):
    def grad(dy):
        return -2.0 * x * dy

    return x * x, grad


@tf.custom_gradient
def square_no_upstream(x):
    def grad(dy):
        return 2.0 * x  # forgot to multiply by dy

    return x * x, grad


@tf.custom_gradient
def straight_through_round(x):
    """Rounds in the forward pass, passes the gradient straight through on purpose."""

    def grad(dy):
        return dy

    return tf.round(x), grad
