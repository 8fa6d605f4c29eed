"""The probe under the JAX and torch Keras backends: the same arrays as :mod:`explorer.watch.probe` where the
backend's own autodiff gives them, run eagerly on the probe batch once per record.

* torch: the layers' inputs and outputs from one forward pass, the loss gradient at each input from
  ``torch.autograd.grad``, each layer's local custom gradient from its own call on a detached copy;
* JAX: the forward through ``model.stateless_call`` with a zero added to each watched layer's input, so that
  ``jax.value_and_grad`` in those zeros is the loss gradient at each input; the local gradient by ``jax.vjp`` of
  the layer's call.

Not recorded on these backends (NaN, and said once): the mismatch, whose reference backward is TensorFlow code
(the catalogue's ops are TensorFlow). Which layers are watched: those named (``layers=[...]``), else every leaf
layer whose class is not Keras's own (a team's ``keras.ops.custom_gradient`` layer): TensorFlow's graph, where
:mod:`explorer.watch.layers` sees a custom gradient, does not exist here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from explorer.watch.layers import leaf_layers, recording

NOT_RECORDED = "the mismatch (its reference backward is TensorFlow code)"


def candidate_layers(model: keras.Model, names: Sequence[str] | None) -> list[keras.layers.Layer]:
    """The named leaf layers, or every leaf layer whose class is defined outside Keras."""
    leaves = leaf_layers(model)
    if names is not None:
        by_name = {layer.name: layer for layer in leaves}
        unknown = [name for name in names if name not in by_name]
        if unknown:
            raise ValueError(f"layers {', '.join(map(repr, unknown))} are not in model {model.name!r}; its layers: "
                             + ", ".join(by_name))  # fmt: skip
        return [by_name[name] for name in names]
    return [layer for layer in leaves if not type(layer).__module__.startswith("keras.")]


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(value))


def _joined(values: Sequence[Any]) -> np.ndarray:
    return np.concatenate([_numpy(v).reshape(-1) for v in values]) if values else np.zeros(0, np.float32)


def _loss(model: keras.Model, x, y, y_pred, weights):
    return model.compute_loss(x, y, y_pred, weights, training=False)


def probe_torch(model: keras.Model, layers: Sequence[keras.layers.Layer], x, y, weights):
    """``(loss, [per layer: x, y, local, dx])`` under the torch backend, in call order of ``layers``."""
    import torch

    calls: dict[int, list] = {id(layer): [] for layer in layers}

    def on_call(layer, original, args, kwargs):
        first = args[0]
        if isinstance(first, torch.Tensor) and not first.requires_grad and first.is_floating_point():
            first = first.detach().requires_grad_(True)  # the model's input: a leaf the loss can be differentiated in
        outputs = original(first, *args[1:], **kwargs)
        with torch.enable_grad():
            copy = first.detach().requires_grad_(True)
            again = original(copy, *args[1:], **kwargs)
            (local,) = torch.autograd.grad(again, copy, torch.ones_like(again), allow_unused=True)
        calls[id(layer)].append((first, outputs, torch.zeros_like(copy) if local is None else local))
        return outputs

    x_t, y_t = keras.ops.convert_to_tensor(x), None if y is None else keras.ops.convert_to_tensor(y)
    with torch.enable_grad(), recording(layers, on_call):
        y_pred = model(x_t, training=False)
        loss = _loss(model, x_t, y_t, y_pred, weights)
    inputs = [c[0] for layer in layers for c in calls[id(layer)]]
    gradients = torch.autograd.grad(loss, inputs, allow_unused=True, retain_graph=False)
    results, at = [], 0
    for layer in layers:
        seen = calls[id(layer)]
        dx = [torch.zeros_like(c[0]) if g is None else g for c, g in zip(seen, gradients[at : at + len(seen)], strict=True)]
        at += len(seen)
        results.append({"x": _joined([c[0].detach() for c in seen]), "y": _joined([c[1].detach() for c in seen]),
                        "local": _joined([c[2] for c in seen]), "dx": _joined(dx)})  # fmt: skip
    return float(loss.detach()), results


def probe_jax(model: keras.Model, layers: Sequence[keras.layers.Layer], x, y, weights):
    """``(loss, [per layer: x, y, local, dx])`` under the JAX backend, in call order of ``layers``."""
    import jax
    import jax.numpy as jnp

    shapes: list[tuple] = []

    def shape_of(layer, original, args, kwargs):
        shapes.append((id(layer), tuple(args[0].shape), args[0].dtype))
        return original(*args, **kwargs)

    with recording(layers, shape_of):
        model(x, training=False)
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    originals: list = []

    def loss_of(zeros):
        recorded, position = [], iter(range(len(zeros)))

        def on_call(layer, original, args, kwargs):
            first = args[0] + zeros[next(position)]
            outputs = original(first, *args[1:], **kwargs)
            recorded.append((first, outputs))
            if len(originals) < len(zeros):
                originals.append((original, args[1:], kwargs))
            return outputs

        with recording(layers, on_call):
            y_pred, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return _loss(model, x, y, y_pred, weights), recorded

    zeros = [jnp.zeros(shape, dtype) for _, shape, dtype in shapes]
    (loss, recorded), gradients = jax.value_and_grad(loss_of, has_aux=True)(zeros)
    results = []
    for layer in layers:
        indices = [k for k, (owner, _, _) in enumerate(shapes) if owner == id(layer)]
        local = []
        for k in indices:
            original, rest, kwargs = originals[k]
            out, pullback = jax.vjp(lambda v, original=original, rest=rest, kwargs=kwargs: original(v, *rest, **kwargs),
                                    recorded[k][0])  # fmt: skip
            local.append(pullback(jnp.ones_like(out))[0])
        results.append({"x": _joined([recorded[k][0] for k in indices]), "y": _joined([recorded[k][1] for k in indices]),
                        "local": _joined(local), "dx": _joined([gradients[k] for k in indices])})  # fmt: skip
    return float(loss), results
