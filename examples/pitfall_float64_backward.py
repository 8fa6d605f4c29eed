"""Pitfall: a backward that returns float64 for a float32 input. tape.gradient returns float64, no error.

Caught by: shape_dtype ("gradient dtype is float64").
"""

import tensorflow as tf


@tf.custom_gradient
def identity_with_float64_grad(x):
    """Identity; the backward casts to float64 (e.g. to "be precise") instead of staying in x's dtype."""

    def grad(dy):
        return tf.cast(dy, tf.float64)

    return tf.identity(x), grad
