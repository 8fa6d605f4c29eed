"""A correct custom gradient that reads a variable: its backward takes ``variables=`` and returns the
input gradients and one gradient per variable (TensorFlow requires the keyword when variables are read)."""

import tensorflow as tf

scale = tf.Variable(1.5, name="scale")


@tf.custom_gradient
def scaled(x):
    """y = scale * x with autodiff's gradients written out; a template for a learned surrogate slope."""

    def grad(dy, variables=None):
        return dy * scale, [tf.reduce_sum(dy * x)]

    return scale * x, grad
