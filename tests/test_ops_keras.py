"""SurrogateLayer: training with every op, its input gradient, `.keras` and SavedModel round trips."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import ops
from tests.reference import assert_close, param_sets, reference_for, sweep_grid

OP_KEYS = ops.names()
FEATURES, HIDDEN, SAMPLES = 4, 8, 64


@pytest.fixture(scope="module")
def regression_data():
    """64 seeded points of a smooth target: small enough that one fit per op stays fast."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(SAMPLES, FEATURES)).astype(np.float32)
    y = np.tanh(x @ rng.normal(size=(FEATURES, 1))).astype(np.float32)
    return x, y


def _model(layer: keras.layers.Layer, seed: int = 0) -> keras.Model:
    """Input -> Dense -> SurrogateLayer -> Dense."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(FEATURES,))
    hidden = keras.layers.Dense(HIDDEN)(inputs)
    outputs = keras.layers.Dense(1)(layer(hidden))
    return keras.Model(inputs, outputs)


def _grid(key: str, params: dict) -> np.ndarray:
    points = ops.get(key).declared_points(ops.get(key).resolve(params), "float32")
    return sweep_grid([p.x for p in points if -3 <= p.x <= 3], "float32")


def _input_gradient(fn, x: np.ndarray, upstream: float = 0.5):
    x_tensor = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x_tensor)
        y = fn(x_tensor)
    return tape.gradient(y, x_tensor, output_gradients=tf.fill(tf.shape(y), tf.constant(upstream, y.dtype)))


@pytest.mark.parametrize("key", OP_KEYS)
def test_model_with_layer_fits_two_epochs_with_finite_loss(key, regression_data):
    x, y = regression_data
    model = _model(ops.SurrogateLayer(op=key))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", run_eagerly=False, jit_compile=False)
    before = [w.numpy().copy() for w in model.trainable_weights]
    history = model.fit(x, y, epochs=2, batch_size=SAMPLES, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert len(losses) == 2 and np.isfinite(losses).all(), f"{key}: losses {losses}"
    # the layer before the op learns: the custom gradient reaches it (a step's true gradient would not)
    assert not np.array_equal(before[0], model.trainable_weights[0].numpy()), f"{key}: first Dense kernel frozen"


@pytest.mark.parametrize(
    ("key", "set_name"), [pytest.param(k, s, id=f"{k}-{s}") for k in OP_KEYS for s in param_sets(k)]
)
def test_layer_input_gradient_is_the_custom_gradient(key, set_name):
    params = param_sets(key)[set_name]
    layer = ops.SurrogateLayer(op=key, **params)
    x = _grid(key, params)
    grad = _input_gradient(layer, x)
    expected = reference_for(key).custom_grad(x, np.full_like(x, 0.5), params)
    assert_close(
        grad.numpy(),
        expected,
        x,
        rtol=1e-6,
        atol=1e-6 * max(1.0, np.abs(expected).max()),
        what=f"{key} {set_name} layer input gradient",
    )


@pytest.mark.parametrize("key", OP_KEYS)
def test_layer_with_true_gradient_uses_autodiff(key):
    ref = reference_for(key)
    params = param_sets(key)["nondefault" if ref.nondefault else "default"]
    layer = ops.SurrogateLayer(op=key, gradient="true", params=params)
    x = _grid(key, params)
    grad = _input_gradient(layer, x)
    if ref.true_grad == "none":
        assert grad is None
    elif ref.true_grad == "zero":
        np.testing.assert_array_equal(grad.numpy(), np.zeros_like(x))
    else:
        expected = ref.true_grad(x, np.full_like(x, 0.5), params)
        assert_close(grad.numpy(), expected, x, rtol=1e-6, atol=1e-6, what=f"{key} layer true gradient")


def test_layer_rejects_unknown_gradient_mode_and_bad_params():
    with pytest.raises(ValueError, match="gradient"):
        ops.SurrogateLayer(op="atan", gradient="autodiff")
    with pytest.raises(ValueError, match="alpha"):
        ops.SurrogateLayer(op="atan", alpha=-1.0)
    with pytest.raises(KeyError):
        ops.SurrogateLayer(op="no_such_op")


@pytest.mark.parametrize("key", OP_KEYS)
def test_keras_file_round_trip_keeps_config_and_custom_gradient(key, tmp_path):
    ref = reference_for(key)
    params = dict(ref.nondefault or ref.defaults)
    x = _grid(key, params)
    inputs = keras.Input(shape=(x.size,))
    model = keras.Model(inputs, ops.SurrogateLayer(op=key, params=params, name="surrogate")(inputs))
    path = tmp_path / f"{key}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    layer = loaded.get_layer("surrogate")
    assert isinstance(layer, ops.SurrogateLayer)
    config = layer.get_config()
    assert (config["op"], config["gradient"]) == (key, "custom")
    assert config["params"] == pytest.approx(params)
    grad = _input_gradient(loaded, x[None, :])
    expected = ref.custom_grad(x, np.full_like(x, 0.5), params)[None, :]
    assert_close(
        grad.numpy(),
        expected,
        x[None, :],
        rtol=1e-6,
        atol=1e-6 * max(1.0, np.abs(expected).max()),
        what=f"{key} gradient after .keras reload",
    )


def test_keras_file_round_trip_keeps_true_gradient_mode(tmp_path):
    inputs = keras.Input(shape=(3,))
    model = keras.Model(inputs, ops.SurrogateLayer(op="ste_sign", gradient="true", name="s")(inputs))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.get_layer("s").get_config()["gradient"] == "true"
    grad = _input_gradient(loaded, np.array([[-0.5, 0.0, 0.5]], np.float32))
    np.testing.assert_array_equal(grad.numpy(), np.zeros((1, 3)))


@pytest.mark.parametrize(("key", "params"), [("ste_sign", {"clip_value": 0.5}), ("atan", {"alpha": 4.0})])
def test_saved_model_export_keeps_the_custom_gradient(key, params, tmp_path):
    """After model.export + tf.saved_model.load, the gradient is the custom one, not autodiff."""
    x = np.array([[-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0]], np.float32)
    inputs = keras.Input(shape=(x.shape[1],))
    model = keras.Model(inputs, ops.SurrogateLayer(op=key, params=params)(inputs))
    path = str(tmp_path / "exported")
    model.export(path, format="tf_saved_model", verbose=False)
    reloaded = tf.saved_model.load(path)

    grad = _input_gradient(reloaded.serve, x)
    full_params = ops.get(key).resolve(params)
    expected = reference_for(key).custom_grad(x, np.full_like(x, 0.5), full_params)
    assert grad is not None, f"{key}: no gradient through the reloaded SavedModel"
    assert_close(grad.numpy(), expected, x, rtol=1e-6, atol=1e-6, what=f"{key} gradient after SavedModel reload")
    true_grad = _input_gradient(lambda t: ops.get(key).forward(t, **params), x)
    autodiff = np.zeros_like(x) if true_grad is None else true_grad.numpy()
    assert not np.allclose(grad.numpy(), autodiff), "the test op must have a custom gradient unlike autodiff"
    np.testing.assert_allclose(reloaded.serve(tf.constant(x)).numpy(), model(x).numpy())
