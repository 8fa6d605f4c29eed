"""A correct custom gradient with two outputs: one upstream gradient per output."""

import tensorflow as tf


@tf.custom_gradient
def sin_cos(x):
    """Both outputs from one call; the backward is autodiff's, d/dx (sin, cos) = (cos, -sin)."""
    sin, cos = tf.sin(x), tf.cos(x)

    def grad(dsin, dcos):
        return dsin * cos - dcos * sin

    return (sin, cos), grad
