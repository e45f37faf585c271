"""Correct custom gradients for benchmarks/bench_jobs.py: half b of the suite."""

import tensorflow as tf


@tf.custom_gradient
def matmul_b1(A, W):
    def grad(dy):
        return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)

    return tf.matmul(A, W), grad


@tf.custom_gradient
def matmul_b2(A, W):
    def grad(dy):
        return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)

    return tf.matmul(A, W), grad


@tf.custom_gradient
def tanh_b1(x):
    y = tf.tanh(x)

    def grad(dy):
        return dy * (1.0 - y * y)

    return y, grad


@tf.custom_gradient
def tanh_b2(x):
    y = tf.tanh(x)

    def grad(dy):
        return dy * (1.0 - y * y)

    return y, grad


@tf.custom_gradient
def softplus_b1(x):
    def grad(dy):
        return dy * tf.sigmoid(x)

    return tf.math.softplus(x), grad


@tf.custom_gradient
def softplus_b2(x):
    def grad(dy):
        return dy * tf.sigmoid(x)

    return tf.math.softplus(x), grad


@tf.custom_gradient
def bilinear_b1(x, M, z):
    Mz = tf.linalg.matvec(M, z)

    def grad(dy):
        return (
            dy[:, None] * Mz,
            dy[:, None, None] * x[:, :, None] * z[:, None, :],
            dy[:, None] * tf.linalg.matvec(M, x, transpose_a=True),
        )

    return tf.reduce_sum(x * Mz, axis=-1), grad


@tf.custom_gradient
def bilinear_b2(x, M, z):
    Mz = tf.linalg.matvec(M, z)

    def grad(dy):
        return (
            dy[:, None] * Mz,
            dy[:, None, None] * x[:, :, None] * z[:, None, :],
            dy[:, None] * tf.linalg.matvec(M, x, transpose_a=True),
        )

    return tf.reduce_sum(x * Mz, axis=-1), grad
