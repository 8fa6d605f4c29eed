"""A correct custom gradient with a bool flag: the flag is positional-only, so TensorFlow passes it as a
tensor input (also inside tf.function), and the backward uses tf.where on it and returns None for it."""

import tensorflow as tf


@tf.custom_gradient
def binarize(x, clip=False, /):
    """Forward sign(x), whose true gradient is zero almost everywhere; the straight-through estimator
    passes dy, or with clip only where |x| <= 1 (Courbariaux et al. 2016, BinaryNet)."""

    def grad(dy):
        inside = tf.cast(tf.abs(x) <= 1.0, dy.dtype)
        return tf.where(clip, dy * inside, dy), None

    return tf.sign(x), grad
