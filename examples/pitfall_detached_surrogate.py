"""Pitfall: a spike surrogate computed under tf.stop_gradient.

The first derivative is the fast-sigmoid surrogate 1 / (|x| + 1)^2 and every first-order check passes. A
gradient penalty, a Hessian-vector product or meta-learning differentiates it again: TensorFlow follows the ops
of the backward, and tf.stop_gradient cuts them, so the second derivative is None where the surrogate's own
derivative -2 sign(x) / (|x| + 1)^3 is not 0 (0.128, 0.593, 0, -0.593, -0.128 at x = -1.5, -0.5, 0, 0.5, 1.5).

Caught by: second_order (a warning naming the cause and the inputs). Fix: no stop_gradient (examples/spike.py).
"""

import tensorflow as tf


@tf.custom_gradient
def spike_detached(x):
    def grad(dy):
        return dy * tf.stop_gradient(1.0 / tf.square(tf.abs(x) + 1.0))

    return tf.cast(x > 0, x.dtype), grad
