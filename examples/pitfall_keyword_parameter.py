"""Pitfall: a keyword parameter. f(x, slope=10.0) is fine eagerly; inside tf.function TensorFlow raises
ValueError ("supports keywords arguments only when eager"). Passed positionally, the Python float becomes
an input that needs its own gradient ("expected to return 2 gradients").

Caught by: graph (the checker passes a non-default slope by keyword, as the signature asks).
"""

import tensorflow as tf


@tf.custom_gradient
def scaled_identity(x, slope=25.0):
    """Multiplies by slope; the backward scales dy by slope (the true gradient)."""

    def grad(dy):
        return dy * slope

    return x * slope, grad
