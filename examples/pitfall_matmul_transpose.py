"""Pitfall: a matrix-product backward with a missing transpose. With square matrices it runs and returns
the wrong numbers; with a (2, 3) @ (3, 4) product it cannot even multiply.

Caught by: shape_dtype (the backward raises for inputs a (2, 3), b (3, 4), or gives a wrong shape).
"""

import tensorflow as tf


@tf.custom_gradient
def matmul_no_transpose(a, b):
    """a @ b; the backward writes dy @ b instead of dy @ b^T (and a @ dy instead of a^T @ dy)."""

    def grad(dy):
        return tf.matmul(dy, b), tf.matmul(a, dy)

    return tf.matmul(a, b), grad
