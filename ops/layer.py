"""A Keras layer that applies any registered op, with its custom or its true gradient."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from ops.learnable import apply as apply_learning
from ops.registry import OpSpec, Param, get

GRADIENT_MODES = ("custom", "true")


@keras.saving.register_keras_serializable(package="gradient_explorer")
class WithinRange(keras.constraints.Constraint):
    """Keeps a learned parameter inside its declared range ``[low, high]`` after every optimiser step."""

    def __init__(self, low: float, high: float):
        self.low, self.high = float(low), float(high)

    def __call__(self, value):
        return keras.ops.clip(value, self.low, self.high)

    def get_config(self) -> dict[str, float]:
        return {"low": self.low, "high": self.high}


@keras.saving.register_keras_serializable(package="gradient_explorer")
class SurrogateLayer(keras.layers.Layer):
    """Applies ``op`` element-wise.

    ``gradient="custom"`` trains through the op's custom gradient (``spec.apply``);
    ``gradient="true"`` trains through autodiff of the plain forward (``spec.forward``), so a
    step or sign passes no gradient. Parameters are keyword arguments named as in the op's
    spec, or a ``params`` dict (the form :meth:`get_config` writes). Only built-in ops
    serialise by key; a user op's layer raises on ``get_config``.

    ``trainable_params``: parameters that become trained weights of the layer (started at their value in
    ``params``, kept inside their declared range), their gradient that of the surrogate's primitive
    (:mod:`ops.learnable`, which also says which parameters of which ops can be learned, and why not the others).
    A saved ``.keras`` model keeps their trained values.
    """

    def __init__(
        self,
        op: str | OpSpec = "atan",
        gradient: str = "custom",
        params: dict | None = None,
        trainable_params: tuple[str, ...] | list[str] = (),
        **kwargs: Any,
    ):
        spec = get(op)
        op_params = {k: kwargs.pop(k) for k in list(kwargs) if k in spec.param_names}
        super().__init__(**kwargs)
        if gradient not in GRADIENT_MODES:
            raise ValueError(f"gradient must be one of {GRADIENT_MODES}, got {gradient!r}")
        self.spec = spec
        self.gradient = gradient
        self.params = spec.resolve({**(params or {}), **op_params})
        if isinstance(trainable_params, str):
            trainable_params = (trainable_params,)
        self.trainable_params = tuple(trainable_params)
        if self.trainable_params:
            if gradient != "custom":
                raise ValueError("trainable_params need gradient='custom': autodiff of the plain forward gives them no gradient")
            apply_learning(spec, tf.zeros((1,)), self.trainable_params, self.params)  # ValueError: which and why not
        self.learned: dict[str, keras.Variable] = {}

    def build(self, input_shape):
        declared = {param.name: param for param in self.spec.params}
        for name in self.trainable_params:
            param: Param = declared[name]
            self.learned[name] = self.add_weight(
                name=name, shape=(), initializer=keras.initializers.Constant(self.params[name]),
                constraint=WithinRange(param.low, param.high), trainable=True,
            )  # fmt: skip
        super().build(input_shape)

    def call(self, inputs):
        if self.learned:
            values = {**self.params, **{name: tf.convert_to_tensor(v) for name, v in self.learned.items()}}
            return apply_learning(self.spec, inputs, self.trainable_params, values)
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
        config = {**super().get_config(), "op": self.spec.key, "gradient": self.gradient, "params": dict(self.params)}
        if self.trainable_params:
            config["trainable_params"] = list(self.trainable_params)
        return config
