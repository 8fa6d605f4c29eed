"""A correct reducing custom gradient: the Euclidean norm over the last axis with a finite gradient at 0.

The output has one axis less than x; the gradient has x's shape. Autodiff of tf.norm is NaN at the zero
vector (0 / 0); this backward returns 0 there, a subgradient of the norm.
"""

import tensorflow as tf


@tf.custom_gradient
def safe_norm(x):
    """Autodiff of sqrt(sum x^2) is x / |x|, NaN at the zero vector; 0 there is a valid subgradient and keeps
    training finite."""
    squares = tf.reduce_sum(tf.square(x), axis=-1, keepdims=True)
    nonzero = squares > 0
    root = tf.sqrt(tf.where(nonzero, squares, tf.ones_like(squares)))
    norm = tf.where(nonzero, root, tf.zeros_like(root))

    def grad(dy):
        return tf.expand_dims(dy, -1) * tf.where(nonzero, x / root, tf.zeros_like(x))

    return tf.squeeze(norm, -1), grad
