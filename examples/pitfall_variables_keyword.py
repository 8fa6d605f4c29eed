"""Pitfall: a function that reads a variable, with a backward that does not take ``variables=``.
TensorFlow raises "grad_fn must accept keyword argument 'variables'" at the first call.

Caught by: every check, named (the function cannot run at all).
"""

import tensorflow as tf

gain = tf.Variable(2.0, name="gain")


@tf.custom_gradient
def gained(x):
    """y = gain * x; the backward forgets the variable."""

    def grad(dy):
        return dy * gain

    return gain * x, grad
