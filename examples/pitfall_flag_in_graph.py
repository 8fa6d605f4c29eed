"""Pitfall: a bool flag used in Python ``if``. Eagerly ``sign_ste(x, clip=True)`` works; inside tf.function
(Model.fit) TensorFlow refuses the keyword, and passed positionally the flag is a tensor that ``if``
cannot read. (A real binarised-network repository has this bug.)

Caught by: graph, at clip=True ("tf.function raised ... keywords arguments only when eager").
"""

import tensorflow as tf


@tf.custom_gradient
def sign_ste(x, clip=False):
    """sign(x) with the straight-through estimator; with clip, only where |x| <= 1 (BinaryNet)."""

    def grad(dy):
        if clip:
            return dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype)
        return dy

    return tf.sign(x), grad
