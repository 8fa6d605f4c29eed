"""Pitfall: a norm whose backward divides by the norm: NaN at the zero vector (0 / 0), in every dtype.

Caught by: finite ("the gradient of x is NaN ... at the zero vector").
"""

import tensorflow as tf


@tf.custom_gradient
def norm_naive_grad(x):
    """The Euclidean norm over the last axis; the backward is x / |x|."""
    norm = tf.norm(x, axis=-1)

    def grad(dy):
        return tf.expand_dims(dy, -1) * x / tf.expand_dims(norm, -1)

    return norm, grad
