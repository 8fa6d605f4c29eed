"""Pitfall: an override without a stated reason (no docstring, no justification).

Caught by: vs_autodiff (a warning, "no justification documented").
"""

import tensorflow as tf


@tf.custom_gradient
def clipped_identity(x):
    def grad(dy):
        return tf.clip_by_value(dy, -0.5, 0.5)

    return tf.identity(x), grad
