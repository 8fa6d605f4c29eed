"""A correct custom gradient on a restricted domain: log(sinh(x)) is defined for x > 0 only.

Outside the domain the forward is NaN (as log of a negative number is); the checker finds the domain
from the float64 forward and checks inside it.
"""

import math

import tensorflow as tf


@tf.custom_gradient
def log_sinh(x):
    """Autodiff of log(sinh(x)) is cosh / sinh, inf / inf = NaN for large x; 1 / tanh(x) is the same
    derivative without overflow. The forward is log(sinh(x)) below 1 and x + log(1 - exp(-2x)) - log(2)
    above, which does not overflow either."""
    large = x + tf.math.log1p(-tf.exp(-2.0 * tf.maximum(x, 1.0))) - math.log(2.0)
    y = tf.where(x < 1.0, tf.math.log(tf.sinh(x)), large)

    def grad(dy):
        return dy / tf.math.tanh(x)

    return y, grad
