"""Pitfall: a stable softplus forward with the textbook backward e / (1 + e), e = exp(x).

At x = 100 in float32 the forward is 100 but exp(100) = inf and inf / inf = NaN. On [-3, 3] all is fine.
Caught by: finite ("gradient is NaN at x = 100").
"""

import tensorflow as tf


@tf.custom_gradient
def softplus_naive_grad(x):
    """Softplus; the backward is the sigmoid written as e / (1 + e)."""
    y = tf.math.softplus(x)

    def grad(dy):
        e = tf.exp(x)
        return dy * e / (1.0 + e)

    return y, grad
