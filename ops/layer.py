"""A Keras layer that applies any registered op, with its custom or its true gradient."""

from __future__ import annotations

from typing import Any

import keras

from ops.registry import OpSpec, get

GRADIENT_MODES = ("custom", "true")


@keras.saving.register_keras_serializable(package="gradient_explorer")
class SurrogateLayer(keras.layers.Layer):
    """Applies ``op`` element-wise.

    ``gradient="custom"`` trains through the op's custom gradient (``spec.apply``);
    ``gradient="true"`` trains through autodiff of the plain forward (``spec.forward``), so a
    step or sign passes no gradient. Parameters are keyword arguments named as in the op's
    spec, or a ``params`` dict (the form :meth:`get_config` writes). Only built-in ops
    serialise by key; a user op's layer raises on ``get_config``.
    """

    def __init__(self, op: str | OpSpec = "atan", gradient: str = "custom", params: dict | None = None, **kwargs: Any):
        spec = get(op)
        op_params = {k: kwargs.pop(k) for k in list(kwargs) if k in spec.param_names}
        super().__init__(**kwargs)
        if gradient not in GRADIENT_MODES:
            raise ValueError(f"gradient must be one of {GRADIENT_MODES}, got {gradient!r}")
        self.spec = spec
        self.gradient = gradient
        self.params = spec.resolve({**(params or {}), **op_params})

    def call(self, inputs):
        fn = self.spec.apply if self.gradient == "custom" else self.spec.forward
        return fn(inputs, **self.params)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict[str, Any]:
        if not self.spec.builtin:
            if self.spec.user_function is not None:
                raise NotImplementedError(
                    f"op {self.spec.key!r} is your own function: to save a model with it, use your own layer "
                    "that calls it, registered with @keras.saving.register_keras_serializable"
                )
            raise NotImplementedError(
                f"op {self.spec.key!r} is a user op: export its code (Editor page) to save a model with it"
            )
        return {**super().get_config(), "op": self.spec.key, "gradient": self.gradient, "params": dict(self.params)}
