"""The checks of a Keras layer, and the two that go through one: a ``Model.fit`` step
(:func:`keras_fit_through`) and a ``model.export`` round trip (:func:`saved_model_through`).

A layer class is checked built with no arguments (:data:`explorer.checker.plan.LAYER_PLAN`): ``keras_fit``,
``input_gradient`` (its input gradient equals the custom gradient of the function it calls, not autodiff of a
copy of the forward), ``keras_save`` (``.keras`` save and load; an unregistered layer warns) and
``saved_model``. An elementwise function's ``keras_fit`` and ``saved_model`` use the same two helpers with a
layer that calls it (:mod:`explorer.checker.elementwise`).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from explorer.checker.common import COMPARE_TOLERANCE, Check, explained, fmt, guarded, result, value_and_grad
from ops.inputs import error_text


@guarded("keras_fit")
def keras_fit_through(layer: keras.layers.Layer) -> Check:
    """One ``Model.fit`` step of Dense(4) -> ``layer`` -> Dense(1): a finite loss, and the Dense layer before it
    moved (a gradient flows back through ``layer``)."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    features = rng.normal(size=(32, 4)).astype("float32")
    targets = rng.normal(size=(32, 1)).astype("float32")
    before = keras.layers.Dense(4, name="before_op")
    model = keras.Sequential([keras.Input(shape=(4,)), before, layer, keras.layers.Dense(1)])
    # no XLA here: the graph check covers jit_compile, and compiling the train step with it costs seconds
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse", jit_compile=False)
    start = [w.copy() for w in before.get_weights()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(features, targets, batch_size=32, epochs=1, verbose=0)
    keras_said = [str(w.message) for w in caught if "Gradients do not exist" in str(w.message)]
    loss = float(history.history["loss"][-1])
    if not np.isfinite(loss):
        return result("keras_fit", "fail", f"Model.fit ran but the loss is {loss}")
    moved = any(not np.array_equal(a, b) for a, b in zip(start, before.get_weights(), strict=True))
    if not moved:
        return result(
            "keras_fit",
            "warn",
            f"one Model.fit step ran (loss {fmt(loss)}), but the Dense layer before the op did not move: "
            "no gradient flows back through the op at these parameters"
            + (" (Keras: gradients do not exist for its variables)" if keras_said else ""),
        )
    return result("keras_fit", "pass", f"one Model.fit step: loss {fmt(loss)} (finite); the layer before the op moved")


def _export_and_reload(model: keras.Model, directory: Path):
    path = directory / "exported"
    model.export(str(path), verbose=False)
    return tf.saved_model.load(str(path))


def _equals_true(gradient: np.ndarray, true_call: Callable[[tf.Tensor], tf.Tensor] | None, x: tf.Tensor) -> bool:
    """Whether ``gradient`` is autodiff's gradient of ``true_call`` at ``x`` (False without a true call)."""
    if true_call is None:
        return False
    _, true_grad = value_and_grad(true_call, x)
    return true_grad is not None and np.allclose(gradient, true_grad.numpy(), equal_nan=True, **COMPARE_TOLERANCE)


@guarded("saved_model")
def saved_model_through(make_layer: Callable[[], keras.layers.Layer], true_call: Callable | None = None) -> Check:
    """Export a model around ``make_layer()`` with ``model.export``, reload it and compare input gradients
    (with ``true_call``, the forward whose autodiff is the true gradient: say when a lost custom gradient
    could not show)."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    inputs = keras.Input(shape=(4,))
    model = keras.Model(inputs, make_layer()(inputs))
    want_y, want_grad = value_and_grad(model, x)
    if want_grad is None:
        return result("saved_model", "fail", "the model's input gradient is None before export (see finite)")
    with tempfile.TemporaryDirectory() as directory:
        try:
            # TensorFlow prints the traceback of a gradient it cannot save to stderr: the check reports it
            with contextlib.redirect_stderr(io.StringIO()):
                reloaded = _export_and_reload(model, Path(directory))
        except Exception as error:  # noqa: BLE001
            cause = error.__cause__ or error
            return result("saved_model", "fail", f"model.export raised {explained(cause)}")
        got_y, got_grad = value_and_grad(reloaded.serve, x)
    if got_grad is None:
        return result(
            "saved_model", "fail", "after model.export and reload the input gradient is None: the custom gradient was lost"
        )
    got, want = got_grad.numpy(), want_grad.numpy()
    if not np.allclose(got_y.numpy(), want_y.numpy(), equal_nan=True, **COMPARE_TOLERANCE):
        return result("saved_model", "fail", "after model.export and reload the output differs from the original model")
    if not np.allclose(got, want, equal_nan=True, **COMPARE_TOLERANCE):
        gap = float(np.max(np.abs(got - want)))
        lost = ": it equals autodiff, the custom gradient was lost" if _equals_true(got, true_call, x) else ""
        return result(
            "saved_model", "fail", f"after model.export and reload the input gradient differs by up to {fmt(gap)}{lost}"
        )
    same_as_true = ""
    if _equals_true(want, true_call, x):
        same_as_true = " (here the custom gradient equals the true one, so a lost custom gradient would not show)"
    return result(
        "saved_model",
        "pass",
        f"model.export + tf.saved_model.load: output and input gradient equal the custom ones on 32 inputs{same_as_true}",
    )


def required_arguments(layer_class: type) -> list[str]:
    """Constructor parameters without a default (``units`` of ``MyLayer(units)``): the checks cannot build it."""
    try:
        parameters = inspect.signature(layer_class).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in parameters if p.default is inspect.Parameter.empty and p.kind not in kinds]


def _registered(layer_class: type) -> bool:
    name = keras.saving.get_registered_name(layer_class)
    return keras.saving.get_registered_object(name) is layer_class


@guarded("input_gradient")
def check_input_gradient(layer_class: type, functions: Sequence[tuple[str, Callable[..., Any]]]) -> Check:
    """The layer's input gradient equals the custom gradient of the one of ``functions`` whose output it has."""
    rng = np.random.default_rng(2)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    built = layer_class()
    y, grad = value_and_grad(built, x)
    if grad is None:
        return result("input_gradient", "fail", "the layer's input gradient is None: no gradient reaches its input")
    output, gradient = y.numpy(), grad.numpy()
    same_output = []
    for name, fn in functions:
        try:
            fn_y, fn_grad = value_and_grad(fn, x)
        except Exception:  # noqa: BLE001 - a function that cannot take this input is not the one called
            continue
        if fn_y.shape == y.shape and np.allclose(fn_y.numpy(), output, **COMPARE_TOLERANCE):
            if fn_grad is not None and np.allclose(fn_grad.numpy(), gradient, **COMPARE_TOLERANCE):
                return result(
                    "input_gradient",
                    "pass",
                    f"the input gradient equals the custom gradient of {name} on 32 inputs (the output matches it too)",
                )
            same_output.append((name, fn_grad))
    if same_output:
        name, fn_grad = same_output[0]
        gap = "None" if fn_grad is None else fmt(float(np.max(np.abs(fn_grad.numpy() - gradient))))
        return result(
            "input_gradient",
            "fail",
            f"the layer's output equals {name}'s but its input gradient does not (differs by up to {gap}): "
            f"the layer bypasses {name}'s custom gradient",
        )
    names = ", ".join(name for name, _ in functions) or "none found"
    return result(
        "input_gradient",
        "warn",
        f"the layer's output matches none of the custom-gradient functions of its module ({names}), so its input "
        "gradient could not be compared; pass op=the_function to compare",
    )


@guarded("keras_save")
def check_keras_save(layer_class: type) -> Check:
    """``.keras`` save and load give the same output and input gradient; an unregistered layer warns."""
    rng = np.random.default_rng(3)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    inputs = keras.Input(shape=(4,))
    model = keras.Model(inputs, layer_class()(inputs))
    want_y, want_grad = value_and_grad(model, x)
    fix = (
        f"not registered: decorate {layer_class.__name__} with @keras.saving.register_keras_serializable() "
        "(and give it get_config if __init__ takes arguments)"
    )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.keras"
        model.save(path)
        try:
            loaded = keras.saving.load_model(path)
        except Exception as error:  # noqa: BLE001
            if not _registered(layer_class):
                first = error_text(error).split(". ")[0]
                return result("keras_save", "warn", f"{fix}; its .keras file does not load ({first})")
            return result("keras_save", "fail", f"the .keras file does not load: {error_text(error)}")
    got_y, got_grad = value_and_grad(loaded, x)
    if not np.allclose(got_y.numpy(), want_y.numpy(), **COMPARE_TOLERANCE):
        return result("keras_save", "fail", "after .keras save and load the output differs")
    if (
        got_grad is None
        or want_grad is None
        or not np.allclose(got_grad.numpy(), want_grad.numpy(), **COMPARE_TOLERANCE)
    ):
        return result("keras_save", "fail", "after .keras save and load the input gradient differs")
    registered = "" if _registered(layer_class) else f" (loaded here, but {fix})"
    return result("keras_save", "pass", f".keras save and load: same output and input gradient{registered}")
