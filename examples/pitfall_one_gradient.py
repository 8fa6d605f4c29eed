"""Pitfall: a backward that returns one gradient for two tensor inputs. TensorFlow raises "expected to
return 2 gradients" the first time a gradient is taken.

Caught by: shape_dtype (and every check that takes a gradient), naming both inputs.
"""

import tensorflow as tf


@tf.custom_gradient
def product_one_gradient(x, y):
    """x * y; the backward forgets y's gradient."""

    def grad(dy):
        return dy * y

    return x * y, grad
