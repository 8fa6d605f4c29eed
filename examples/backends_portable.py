"""Custom gradients written once with ``keras.ops.custom_gradient`` that agree on TensorFlow, JAX and PyTorch.

``python -m explorer verify --backends all examples/backends_portable.py`` passes every check on every
installed backend. What makes them portable (RUNBOOK.md, "Other Keras backends"):

* the backward takes ``*args, upstream=None``: TensorFlow and JAX call ``grad(dy)``, Keras's torch backend
  ``grad(*inputs, upstream=dy)``;
* parameters are closed over by a factory (``make_spike(slope)``), never passed by keyword;
* one output per custom op; the gradient has the input's shape and dtype; no Python ``if`` on a tensor.
"""

import keras
from keras import ops

GRADIENT_EXPLORER = {
    "scaled_norm_grad": {"justification": "gradient clipping by value: each element of 2 x dy is kept in [-1, 1]"},
}


def _upstream(args, upstream):
    return args[-1] if upstream is None else upstream


def make_spike(slope=10.0):
    """A spiking non-linearity: forward a step at 0, backward the fast-sigmoid surrogate
    1 / (1 + slope |x|)^2 (Zenke & Ganguli); ``slope`` is fixed when the function is made."""

    @keras.ops.custom_gradient
    def spike(x):
        def grad(*args, upstream=None):
            dy = _upstream(args, upstream)
            return dy / ops.square(1.0 + slope * ops.abs(x))

        return ops.cast(ops.greater(x, 0.0), x.dtype), grad

    return spike


spike = make_spike(10.0)


@keras.ops.custom_gradient
def clip_ste(x):
    """Straight-through clip to [-1, 1]: the forward clips, the gradient passes inside [-1, 1] and is 0 outside."""

    def grad(*args, upstream=None):
        dy = _upstream(args, upstream)
        return dy * ops.cast(ops.less_equal(ops.abs(x), 1.0), dy.dtype)

    return ops.clip(x, -1.0, 1.0), grad


@keras.ops.custom_gradient
def scaled_norm_grad(x):
    """Square with a gradient clipped by value: 2 x dy, each element at most 1 in magnitude (ops.minimum, not if)."""

    def grad(*args, upstream=None):
        dy = _upstream(args, upstream)
        g = 2.0 * x * dy
        return ops.maximum(ops.minimum(g, 1.0), -1.0)

    return ops.square(x), grad


@keras.saving.register_keras_serializable(package="backends_portable")
class SpikeLayer(keras.layers.Layer):
    """A learnable input gain before the portable spike: y = spike(gain * x), one gain per feature (ones at
    first), so the input gradient is gain * surrogate(gain * x) on every backend."""

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gain")

    def call(self, x):
        return spike(x * self.gain)
