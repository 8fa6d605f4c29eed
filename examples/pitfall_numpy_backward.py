"""Pitfall: NumPy inside the backward. Fine eagerly; AttributeError inside tf.function and Model.fit.

Caught by: graph ("tf.function raised AttributeError ... 'numpy'").
"""

import numpy as np
import tensorflow as tf


@tf.custom_gradient
def tanh_with_numpy_grad(x):
    """tanh; the backward computes 1 - tanh^2 with NumPy, which needs eager tensors."""
    y = tf.math.tanh(x)

    def grad(dy):
        return dy * (1.0 - np.tanh(x.numpy()) ** 2)

    return y, grad
