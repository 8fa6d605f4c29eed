"""A correct broadcasting custom gradient: a bias of shape (n,) added to x of shape (..., n).

The bias gradient is the upstream gradient summed over the axes the bias was broadcast along, so it has
the bias's shape (also for a scalar bias or a bias of x's own shape).
"""

import tensorflow as tf


def _sum_to_shape_of(dy, target):
    """``dy`` summed over the axes along which ``target`` was broadcast (TensorFlow's own rule)."""
    _, axes = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(dy), s1=tf.shape(target))
    return tf.reshape(tf.reduce_sum(dy, axis=axes), tf.shape(target))


@tf.custom_gradient
def bias_add(x, bias):
    """The gradient is autodiff's, written out: dy for x, dy summed back to the bias's shape for the bias."""

    def grad(dy):
        return dy, _sum_to_shape_of(dy, bias)

    return x + bias, grad
