"""Correct custom gradients for benchmarks/bench_jobs.py: half a of the suite."""

import tensorflow as tf


@tf.custom_gradient
def matmul_a1(A, W):
    def grad(dy):
        return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)

    return tf.matmul(A, W), grad


@tf.custom_gradient
def matmul_a2(A, W):
    def grad(dy):
        return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)

    return tf.matmul(A, W), grad


@tf.custom_gradient
def tanh_a1(x):
    y = tf.tanh(x)

    def grad(dy):
        return dy * (1.0 - y * y)

    return y, grad


@tf.custom_gradient
def tanh_a2(x):
    y = tf.tanh(x)

    def grad(dy):
        return dy * (1.0 - y * y)

    return y, grad


@tf.custom_gradient
def softplus_a1(x):
    def grad(dy):
        return dy * tf.sigmoid(x)

    return tf.math.softplus(x), grad


@tf.custom_gradient
def softplus_a2(x):
    def grad(dy):
        return dy * tf.sigmoid(x)

    return tf.math.softplus(x), grad


@tf.custom_gradient
def bilinear_a1(x, M, z):
    Mz = tf.linalg.matvec(M, z)

    def grad(dy):
        return (
            dy[:, None] * Mz,
            dy[:, None, None] * x[:, :, None] * z[:, None, :],
            dy[:, None] * tf.linalg.matvec(M, x, transpose_a=True),
        )

    return tf.reduce_sum(x * Mz, axis=-1), grad


@tf.custom_gradient
def bilinear_a2(x, M, z):
    Mz = tf.linalg.matvec(M, z)

    def grad(dy):
        return (
            dy[:, None] * Mz,
            dy[:, None, None] * x[:, :, None] * z[:, None, :],
            dy[:, None] * tf.linalg.matvec(M, x, transpose_a=True),
        )

    return tf.reduce_sum(x * Mz, axis=-1), grad
