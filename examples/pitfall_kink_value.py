"""Pitfall: |x| whose custom gradient AT the kink is 5.

Every other check passes: 0 is one point of the sweep, and there the derivative is not defined. But the value
AT a kink of a continuous forward should be a subgradient, between the one-sided slopes -1 and 1; 5 pushes a
weight sitting at 0 five times as hard as anywhere else.

Caught by: kink (a failure naming the point, the slopes and the value). Fix: tf.sign(x), which gives 0 there.
"""

import tensorflow as tf


@tf.custom_gradient
def abs_five_at_zero(x):
    def grad(dy):
        return dy * tf.where(tf.equal(x, 0.0), tf.constant(5.0, x.dtype), tf.sign(x))

    return tf.abs(x), grad
