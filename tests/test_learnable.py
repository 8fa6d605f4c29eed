"""Learnable op parameters (ops.learnable, SurrogateLayer(trainable_params=...), Run(learn=True)).

The gradient a learnable parameter gets is that of the surrogate's primitive sigma(x) = int_a^x g(s) ds (a: the
op's jump). It is tested against a finite difference of sum w sigma_phi(x), with sigma integrated here from the
independent NumPy surrogate of tests/reference.py (Gauss-Legendre on each piece between declared points)."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import ops
from explorer.train import trainer as train
from ops import learnable
from tests.reference import reference_for

LEARNABLE = [(key, name) for key in ops.names() for name in learnable.learnable(key)]
X_OFFSETS = np.linspace(-2.2, 2.3, 10) + 0.0123  # inputs around the jump, none on a declared point
WEIGHTS = np.linspace(-1.0, 2.0, 10)  # the upstream gradient dy


def _primitive(key: str, params: dict, x: float) -> float:
    """int_a^x g(s) ds with the reference g, split at every declared point (and the spike_rate_escape peak)."""
    spec, reference = ops.get(key), reference_for(key)
    anchor = next(p.x for p in spec.points(-50, 50, **params) if p.kind == "jump")
    low, high = min(anchor, x), max(anchor, x)
    breaks = {low, high, *(p.x for p in spec.points(low, high, **params))}
    if key == "spike_rate_escape":
        breaks.add(min(max(params["threshold"] + 1.0, low), high))
    nodes, weights = np.polynomial.legendre.leggauss(80)
    total = 0.0
    for left, right in itertools.pairwise(sorted(breaks)):
        s = (left + right) / 2 + (right - left) / 2 * nodes
        total += (right - left) / 2 * float(weights @ reference.custom_grad(s, np.ones_like(s), params))
    return total if x >= anchor else -total


@pytest.mark.parametrize(("key", "name"), LEARNABLE, ids=[f"{k}.{n}" for k, n in LEARNABLE])
def test_a_learned_parameter_s_gradient_is_the_finite_difference_of_the_primitive_loss(key, name):
    spec = ops.get(key)
    params = spec.defaults()
    anchor = next(p.x for p in spec.points(-50, 50, **params) if p.kind == "jump")
    x = X_OFFSETS + anchor
    variable = tf.Variable(params[name], dtype=tf.float64)
    with tf.GradientTape() as tape:
        y = learnable.apply(key, tf.constant(x), [name], {**params, name: variable})
        loss = tf.reduce_sum(y * WEIGHTS)
    gradient = float(tape.gradient(loss, variable))
    step = 1e-5 * max(1.0, abs(params[name]))

    def primitive_loss(value: float) -> float:
        shifted = {**params, name: value}
        return sum(w * _primitive(key, shifted, xi) for w, xi in zip(WEIGHTS, x, strict=True))

    difference = (primitive_loss(params[name] + step) - primitive_loss(params[name] - step)) / (2 * step)
    tolerance = 1e-3 if key == "spike_rate_escape" else 2e-5  # its surrogate peaks (a corner) inside the quadrature
    assert gradient == pytest.approx(difference, rel=tolerance, abs=1e-7)
    # the forward is the op's, the input gradient its custom gradient
    np.testing.assert_array_equal(y.numpy(), spec.forward(tf.constant(x), **params).numpy())


def test_which_parameters_can_be_learned_and_why_not_is_read_from_the_declaration():
    assert learnable.learnable("sigmoid") == ("slope", "threshold")
    assert learnable.learnable("rect") == ("alpha", "threshold")  # a box, but a gain family: exact
    assert learnable.learnable("ste_sign") == () and "box" in learnable.why_not("ste_sign")["clip_value"]
    assert "whole number" in learnable.why_not("dorefa")["k_bit"] or "jumps" in learnable.why_not("dorefa")["k_bit"]
    assert "2 jumps" in learnable.why_not("ste_tern")["threshold_value"]
    assert "continuous" in learnable.why_not("scaled_square")["scale"]
    assert "upstream gradient" in learnable.why_not("clip_gradient")["clip_value"]
    kinds = {(key, name): learnable.kind(key, name) for key, name in LEARNABLE}
    assert kinds[("sigmoid", "threshold")] == "location" and kinds[("sigmoid", "slope")] == "gain"
    assert kinds[("spike_rate_escape", "slope")] == "height" and kinds[("fast_sigmoid", "slope")] == "shape"
    assert {kind for kind in kinds.values()} <= set(learnable.KINDS)
    with pytest.raises(ValueError, match="cannot be learned: the surrogate is a box"):
        learnable.apply("ste_sign", tf.zeros(3), ["clip_value"])


def _dense_then_op(op: str, learn: tuple[str, ...], params: dict) -> keras.Model:
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, kernel_initializer=keras.initializers.GlorotUniform(seed=1), name="hidden")(inputs)
    hidden = ops.SurrogateLayer(op, params=params, trainable_params=learn, name="op")(hidden)
    return keras.Model(inputs, keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=2), name="out")(hidden))


def test_equivalences_a_threshold_is_a_bias_and_a_slope_is_a_gain_on_the_pre_activation():
    x = tf.constant(np.random.default_rng(0).normal(size=(64, 3)), tf.float32)
    model = _dense_then_op("sigmoid", ("slope", "threshold"), {"slope": 3.0, "threshold": 0.1})
    layer, dense = model.get_layer("op"), model.get_layer("hidden")
    with tf.GradientTape(persistent=True) as tape:
        pre = dense(x)
        tape.watch(pre)
        y = model.layers[-1](layer(pre))
        loss = tf.reduce_mean(tf.square(y - 1.0))
    bias, threshold, slope = tape.gradient(loss, [dense.bias, layer.learned["threshold"], layer.learned["slope"]])
    by_pre = tape.gradient(loss, pre)  # dL/du per unit: dy g(u)
    assert float(threshold) == pytest.approx(-float(tf.reduce_sum(bias)), rel=1e-5)  # dL/dtheta = -sum dL/db
    u = pre - 0.1
    assert float(slope) == pytest.approx(float(tf.reduce_sum(u * by_pre)) / 3.0, rel=1e-5)  # (1/k) sum u dL/du


def test_a_layer_with_a_trainable_slope_saves_and_loads_as_keras_with_the_slope_s_value(tmp_path):
    x = np.random.default_rng(1).normal(size=(128, 3)).astype("float32")
    y = (x[:, 0] > 0).astype("float32")
    model = _dense_then_op("atan", ("alpha",), {"alpha": 2.0})
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit(x, y, epochs=3, verbose=0)
    trained = float(model.get_layer("op").learned["alpha"].numpy())
    assert trained != 2.0 and 0.1 <= trained <= 10.0
    path = tmp_path / "learned.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    layer = loaded.get_layer("op")
    assert layer.trainable_params == ("alpha",) and layer.get_config()["trainable_params"] == ["alpha"]
    assert float(layer.learned["alpha"].numpy()) == trained
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(loaded(x))
    assert float(tape.gradient(loss, layer.learned["alpha"])) != 0.0


def test_bad_trainable_params_and_runs_say_why():
    with pytest.raises(ValueError, match="need gradient='custom'"):
        ops.SurrogateLayer("atan", gradient="true", trainable_params=("alpha",))
    with pytest.raises(ValueError, match="has no parameter 'beta'"):
        ops.SurrogateLayer("atan", trainable_params=("beta",))
    with pytest.raises(ValueError, match="ste_tern has no parameter that can be learned"):
        train.Run("ste_tern", learn=True)
    with pytest.raises(ValueError, match="needs the custom gradient"):
        train.Run("atan", gradient="true", learn=True)


def test_a_learning_run_records_its_parameters_trajectory_within_their_ranges():
    result, plain = train.compare(task="moons", runs=[train.Run("triangle", learn=True), train.Run("triangle")], epochs=30, width=8, depth=2)
    columns = [c for c in result.history.columns if c.startswith(train.LEARNED_PREFIX)]
    assert columns == ["learned op_1.alpha", "learned op_1.threshold", "learned op_2.alpha", "learned op_2.threshold"]
    assert result.history[columns[0]].iloc[0] == pytest.approx(1.0) and result.history[columns[1]].iloc[0] == 0.0
    # Adam's first step is lr * g / (|g| + 1e-7) (m and v bias-corrected to g and g^2): 0.03 for each parameter,
    # full batch, the default learning rate; the rows are the values at the start of each epoch
    first_steps = result.history[columns].diff().iloc[1].abs().to_numpy()
    np.testing.assert_allclose(first_steps, [train.DEFAULT_LEARNING_RATE] * 4, rtol=1e-3)
    assert train.DEFAULT_LEARNING_RATE == 0.03
    assert result.history[[columns[0], columns[2]]].min().min() >= 0.1  # alpha stays in its declared range
    assert not any(c.startswith("learned ") for c in plain.history.columns)
    assert result.run.label == "triangle (custom, learnt)"
