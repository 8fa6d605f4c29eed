"""Pitfall: a broadcast input whose gradient is not summed back. For x of shape (4, 3) and a bias of shape
(3,), tape.gradient silently returns a bias gradient of shape (4, 3), with no error.

Caught by: shape_dtype ("input bias: gradient has shape (4, 3), expected (3,)").
"""

import tensorflow as tf


@tf.custom_gradient
def bias_add_unreduced(x, bias):
    """x + bias; the backward returns dy for the bias instead of dy summed over the broadcast axes."""

    def grad(dy):
        return dy, dy

    return x + bias, grad
