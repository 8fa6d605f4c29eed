"""Pitfall: a backward that reduces. For a vector x, tape.gradient returns a scalar, with no error.

Caught by: shape_dtype ("gradient has shape ()").
"""

import tensorflow as tf


@tf.custom_gradient
def double_with_summed_grad(x):
    """Doubles x; the backward should be dy * 2 but sums it over the batch."""

    def grad(dy):
        return tf.reduce_sum(dy) * 2.0

    return 2.0 * x, grad
