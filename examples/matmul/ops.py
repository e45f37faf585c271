"""The classic custom gradient: a matrix product whose backward pass is written by hand."""

import keras
import tensorflow as tf


@tf.custom_gradient
def custom_op(A, W):
    result = tf.matmul(A, W)

    def custom_grad(dy):  # dy = dL/dresult, same shape as result
        grad_A = tf.matmul(dy, W, transpose_b=True)  # dL/dA, shape of A
        grad_W = tf.matmul(A, dy, transpose_a=True)  # dL/dW, shape of W
        return grad_A, grad_W  # one gradient per input, in order

    return result, custom_grad


@tf.custom_gradient
def log1pexp(x):
    """log(1 + exp(x)) that neither overflows nor loses its gradient at large x."""
    result = tf.where(x > 30.0, x, tf.math.log1p(tf.exp(x)))

    def grad(dy):
        return dy * tf.math.sigmoid(x)

    return result, grad


class CustomLayer(keras.layers.Layer):
    """A dense layer whose matrix product uses custom_op."""

    def __init__(self, out_dim, **kwargs):
        super().__init__(**kwargs)
        self.out_dim = out_dim

    def build(self, input_shape):
        self.W = self.add_weight(shape=(input_shape[-1], self.out_dim), initializer="glorot_uniform")

    def call(self, A):
        # A Keras 3 weight passed straight in counts as a variable read in eager
        # mode; converting it first makes it an ordinary input of custom_op.
        return custom_op(A, tf.convert_to_tensor(self.W))
