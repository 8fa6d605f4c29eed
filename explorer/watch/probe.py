"""One compiled function that looks inside a model on a fixed probe batch: :func:`build_probe`.

For every watched layer it returns the layer's inputs and outputs (all its calls, flattened and joined), the
local custom gradient (the layer's backward applied to an upstream of ones: where it is zero the surrogate passes
nothing), the loss gradient reaching the layer's input, and the three sums the mismatch needs: with ``c`` the
gradient of the weights upstream of the layer through its custom backward and ``r`` the same with the layer's
backward swapped for its reference (every other layer unchanged), ``<c, r>``, ``|c|^2`` and ``|r|^2``. Both are
back-propagated from the layer's input (``tape.gradient(x, weights, output_gradients=dx)``), so one forward pass
serves every layer and the mismatch of each layer is its own.

The function runs outside any replica context, on the whole probe batch: under ``tf.distribute`` its numbers
are those of the batch, not of one replica's share, and equal the one-device numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from explorer.watch.layers import WatchedLayer, recording


def loss_function(model: keras.Model) -> tuple[Callable[..., tf.Tensor], str]:
    """``(fn(x, y, y_pred, sample_weight) -> scalar, how)``: the compiled loss on the probe batch, without the
    side effects ``Model.compute_loss`` has on the per-output loss metrics (a single loss); a loss per output
    (a list or dict) goes through ``compute_loss``."""
    loss = getattr(model, "loss", None)
    if isinstance(loss, str):
        loss = keras.losses.get(loss)

    def regularisation() -> tf.Tensor:
        extra = [tf.cast(value, tf.float32) for value in model.losses]
        return tf.add_n(extra) if extra else tf.constant(0.0)

    if isinstance(loss, keras.losses.Loss):
        return (lambda x, y, y_pred, sw: tf.cast(loss(y, y_pred, sample_weight=sw), tf.float32) + regularisation(),
                "the compiled loss")  # fmt: skip
    if callable(loss):

        def per_sample(x, y, y_pred, sw):
            values = tf.cast(loss(y, y_pred), tf.float32)
            if sw is not None:
                weights = tf.cast(tf.reshape(sw, [-1] + [1] * (len(values.shape) - 1)), tf.float32)
                values = values * weights
            return tf.reduce_mean(values) + regularisation()

        return per_sample, "the compiled loss (mean over the probe batch)"
    return (lambda x, y, y_pred, sw: tf.cast(model.compute_loss(x, y, y_pred, sw, training=False), tf.float32),
            "Model.compute_loss")  # fmt: skip


def _flat_join(tensors: Sequence[tf.Tensor | None], like: Sequence[tf.Tensor]) -> tf.Tensor:
    parts = [tf.reshape(t if t is not None else tf.zeros_like(ref), [-1]) for t, ref in zip(tensors, like, strict=True)]
    return tf.concat(parts, axis=0) if len(parts) > 1 else parts[0]


def _first(value: Any) -> tf.Tensor:
    return tf.nest.flatten(value)[0]


def build_probe(model: keras.Model, watched: Sequence[WatchedLayer], *, mismatch: bool = True, training: bool = False):
    """A ``tf.function`` ``probe(x, y, sample_weight) -> (loss, [per layer: dict of tensors])`` (module docstring).
    Keys per layer: ``x``, ``y``, ``local``, ``dx`` (flat), ``dot``, ``custom_sq``, ``reference_sq`` (float64
    scalars) and ``weights`` (how many weight tensors are upstream; 0: no mismatch)."""
    loss_fn, _ = loss_function(model)
    position = {id(w.layer): i for i, w in enumerate(watched)}
    layers = [w.layer for w in watched]

    def probe(x, y, sample_weight):
        calls: list[list[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]] = [[] for _ in watched]
        with tf.GradientTape(persistent=True) as tape:

            def on_call(layer, original, args, kwargs):
                first = _first(args[0])
                tape.watch(first)
                outputs = original(*args, **kwargs)
                with tape.stop_recording(), tf.GradientTape() as local_tape:
                    # the layer's own backward on an upstream of ones, on a graph of its own (not through the rest)
                    copy = tf.identity(first)
                    local_tape.watch(copy)
                    again = _first(original(copy, *args[1:], **kwargs))
                local = local_tape.gradient(again, copy, output_gradients=tf.ones_like(again))
                calls[position[id(layer)]].append((first, _first(outputs), local))
                return outputs

            with recording(layers, on_call):
                y_pred = model(x, training=training)
            loss = loss_fn(x, y, y_pred, sample_weight)
        variables = list(model.trainable_variables)
        every_x = [c[0] for seen in calls for c in seen]
        every_y = [c[1] for seen in calls for c in seen]
        gradients = tape.gradient(loss, every_x + every_y, unconnected_gradients="zero")  # one backward pass
        results, at = [], 0
        for entry, seen in zip(watched, calls, strict=True):
            xs, ys, local = [c[0] for c in seen], [c[1] for c in seen], [c[2] for c in seen]
            dxs = gradients[at : at + len(seen)]
            dys = gradients[len(every_x) + at : len(every_x) + at + len(seen)]
            at += len(seen)
            record = {
                "x": _flat_join(xs, xs), "y": _flat_join(ys, ys), "local": _flat_join(local, xs),
                "dx": _flat_join(dxs, xs),
                "dot": tf.constant(0.0, tf.float64), "custom_sq": tf.constant(0.0, tf.float64),
                "reference_sq": tf.constant(0.0, tf.float64), "weights": tf.constant(0, tf.int32),
            }  # fmt: skip
            if mismatch and entry.reference_fn is not None and variables:
                reference_dxs = []
                for xk, dyk in zip(xs, dys, strict=True):
                    with tf.GradientTape() as inner:
                        inner.watch(xk)
                        reference_y = entry.reference_fn(xk)
                    reference_dxs.append(inner.gradient(reference_y, xk, output_gradients=tf.cast(dyk, reference_y.dtype)))
                reference_dxs = [r if r is not None else tf.zeros_like(xk) for r, xk in zip(reference_dxs, xs, strict=True)]
                custom_w = tape.gradient(xs, variables, output_gradients=dxs)
                reference_w = tape.gradient(xs, variables, output_gradients=reference_dxs)
                pairs = [(c, r) for c, r in zip(custom_w, reference_w, strict=True) if c is not None and r is not None]
                if pairs:
                    c64 = [tf.cast(tf.convert_to_tensor(c), tf.float64) for c, _ in pairs]
                    r64 = [tf.cast(tf.convert_to_tensor(r), tf.float64) for _, r in pairs]
                    record["dot"] = tf.add_n([tf.reduce_sum(c * r) for c, r in zip(c64, r64, strict=True)])
                    record["custom_sq"] = tf.add_n([tf.reduce_sum(c * c) for c in c64])
                    record["reference_sq"] = tf.add_n([tf.reduce_sum(r * r) for r in r64])
                    record["weights"] = tf.constant(len(pairs), tf.int32)
            results.append(record)
        return loss, results

    return tf.function(probe, autograph=False, reduce_retracing=True)


def to_numpy(result) -> tuple[float, list[dict[str, np.ndarray]]]:
    loss, layers = result
    return float(loss.numpy()), [{k: v.numpy() for k, v in layer.items()} for layer in layers]
