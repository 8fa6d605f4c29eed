"""One custom gradient per cross-backend pitfall: each runs without complaint on one Keras backend and goes
wrong on another. ``python -m explorer verify --backends all examples/backends_pitfalls.py`` fails each one's
``backends`` row, naming the backend and mode, what the user gets there, the likely cause and the fix
(RUNBOOK.md, "Other Keras backends"). With TensorFlow alone (the default) some pass every check: that is why
the row exists.
"""

import keras
from keras import ops

GRADIENT_EXPLORER = {"fake_quant_learned_range": {"compare_backends": True}}


@keras.ops.custom_gradient
def tf_style_backward(x):
    """Written TensorFlow's way, ``def grad(upstream)``: torch raises TypeError (multiple values for 'upstream')."""

    def grad(upstream):
        return upstream * ops.cos(x)

    return ops.sin(x), grad


@keras.ops.custom_gradient
def keyword_slope(x, slope=10.0):
    """A keyword parameter: TensorFlow eager only; tf.function raises ValueError, JAX and torch TypeError."""

    def grad(*args, upstream=None):
        dy = args[-1] if upstream is None else upstream
        return dy / ops.square(1.0 + slope * ops.abs(x))

    return ops.cast(ops.greater(x, 0.0), x.dtype), grad


@keras.ops.custom_gradient
def two_outputs(x):
    """Two outputs: TensorFlow calls grad(dy1, dy2), JAX passes one tuple, torch supports one upstream only."""

    def grad(*args, upstream=None):
        dy1, dy2 = (args[0], args[1]) if upstream is None else (upstream, upstream)
        return dy1 * ops.cos(x) - dy2 * ops.sin(x)

    return (ops.sin(x), ops.cos(x)), grad


@keras.ops.custom_gradient
def forgotten_grad(x):
    """The forward forgets to return its backward: torch gives a NaN gradient without an error."""

    def grad(*args, upstream=None):  # noqa: F841 - defined, never returned: the pitfall
        return args[-1] if upstream is None else upstream

    return ops.tanh(x)


@keras.ops.custom_gradient
def mean_upstream(x):
    """The backward returns mean(upstream), a scalar, for a vector input: TensorFlow accepts it silently."""

    def grad(*args, upstream=None):
        dy = args[-1] if upstream is None else upstream
        return 2.0 * ops.mean(dy)

    return 2.0 * x, grad


@keras.ops.custom_gradient
def python_if(x):
    """A Python ``if`` on a tensor in the backward: fails on JAX (also eagerly) and under tf.function."""

    def grad(*args, upstream=None):
        dy = args[-1] if upstream is None else upstream
        if ops.max(ops.abs(dy)) > 1.0:
            return ops.cos(x) * dy / ops.max(ops.abs(dy))
        return ops.cos(x) * dy

    return ops.sin(x), grad


@keras.ops.custom_gradient
def float16_backward(x):
    """The backward casts to float16: a float16 gradient for a float32 input on TensorFlow and JAX, float32 on torch."""

    def grad(*args, upstream=None):
        dy = args[-1] if upstream is None else upstream
        return ops.cast(dy * 2.0 * x, "float16")

    return ops.square(x), grad


def fake_quant_learned_range(x):
    """Keras's own fake quantisation of activations to [0, max(x)], the upper end taken from the input: where x
    ties with it (x equal to its max) the gradient reaching x through the range is 0 on TensorFlow and 1 on JAX
    and torch, so x's gradient there is 1 on TensorFlow and 2 on the others."""
    return keras.quantizers.fake_quant_with_min_max_vars(x, 0.0, ops.max(x), num_bits=8)


class TFStyleLayer(keras.layers.Layer):
    """A layer calling the TensorFlow-style backward: fine on TensorFlow and JAX, a TypeError on torch."""

    def call(self, x):
        return tf_style_backward(x)
