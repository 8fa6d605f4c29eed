"""Custom and true gradients of every registered op against the NumPy reference, finite
differences of smooth primitives, half precision, and compiled-vs-eager equality.

Grids always contain the declared special points (and their neighbouring floats), so the
conventions at a point (closed clip boxes, open rect boxes, sign(0)=+1, relu_at_zero's
``at_zero``, safe_norm's 0 at 0) are asserted exactly where they live.
"""

import functools
import math

import numpy as np
import pytest
import tensorflow as tf

import ops
from tests.reference import (
    POINT_RANGE,
    assert_close,
    declared_points_via,
    param_sets,
    reference_for,
    sweep_grid,
    tolerances,
)

OP_KEYS = ops.names()
UPSTREAMS = (1.0, 0.5, 3.0, -2.0)  # non-unit upstreams matter for clip_gradient, which clips dy
HALF_TOLERANCE = {"float16": 1e-3, "bfloat16": 1e-2}


def _cases(dtypes=("float32", "float64")):
    return [
        pytest.param(key, set_name, dtype, id=f"{key}-{set_name}-{dtype}")
        for key in OP_KEYS
        for set_name in param_sets(key)
        for dtype in dtypes
    ]


def _grid(key: str, set_name: str, dtype: str) -> np.ndarray:
    spec = ops.get(key)
    params = param_sets(key)[set_name]
    points = declared_points_via(spec, -POINT_RANGE, POINT_RANGE, dtype, params)
    return sweep_grid([p.x for p in points], dtype)


@functools.cache
def _custom_gradients(key: str, set_name: str, dtype: str):
    """(x, {upstream: dx}) from one persistent tape over spec.apply; shared by several tests."""
    spec = ops.get(key)
    x = _grid(key, set_name, dtype)
    x_tensor = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x_tensor)
        y = spec.apply(x_tensor, **param_sets(key)[set_name])
    grads = {
        up: tape.gradient(y, x_tensor, output_gradients=tf.fill(tf.shape(y), tf.constant(up, y.dtype)))
        for up in UPSTREAMS
    }
    del tape
    return x, grads


def _peak(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 1.0


# -- custom gradient against the catalogue formula ---------------------------------------------------


@pytest.mark.parametrize(("key", "set_name", "dtype"), _cases())
def test_custom_gradient_matches_reference_including_special_points(key, set_name, dtype):
    ref = reference_for(key)
    params = param_sets(key)[set_name]
    x, grads = _custom_gradients(key, set_name, dtype)
    for upstream, grad in grads.items():
        assert grad is not None, f"{key}: custom gradient is None"
        assert grad.dtype.name == dtype and grad.shape == x.shape
        expected = ref.custom_grad(x, np.full_like(x, upstream), params)
        rtol, atol = tolerances(dtype, scale=_peak(expected))
        assert_close(
            grad.numpy(),
            expected,
            x,
            rtol=rtol,
            atol=atol,
            what=f"{key} {set_name} {dtype} custom gradient, upstream {upstream}",
        )


@pytest.mark.parametrize(("key", "set_name", "dtype"), _cases())
def test_surrogate_grad_equals_tape_gradient(key, set_name, dtype):
    spec = ops.get(key)
    x, grads = _custom_gradients(key, set_name, dtype)
    for upstream in (1.0, 3.0):
        direct = spec.surrogate_grad(tf.constant(x), upstream, **param_sets(key)[set_name])
        assert direct.dtype.name == dtype
        np.testing.assert_allclose(direct.numpy(), grads[upstream].numpy(), rtol=1e-6, atol=1e-12)


def test_float64_parameters_keep_float64_precision():
    """A float64 sweep must not round its hyper-parameters through float32 (alpha=2.1, t=0.05)."""
    x = np.array([0.05, 0.1, 0.3], dtype=np.float64)
    got = ops.get("atan").surrogate_grad(tf.constant(x), alpha=2.1).numpy()
    expected = reference_for("atan").custom_grad(x, np.ones_like(x), {"alpha": 2.1, "threshold": 0.0})
    assert_close(got, expected, x, rtol=0.0, atol=1e-12, what="atan float64 alpha=2.1")
    y = ops.get("ste_tern").apply(tf.constant([0.05, -0.05], tf.float64)).numpy()
    np.testing.assert_array_equal(y, [1.0, -1.0])


@pytest.mark.parametrize("key", OP_KEYS)
def test_custom_gradient_is_finite_on_the_grid(key):
    for set_name in param_sets(key):
        x, grads = _custom_gradients(key, set_name, "float32")
        assert np.isfinite(grads[1.0].numpy()).all(), f"{key} {set_name}: non-finite custom gradient"


def test_named_conventions_at_points():
    """A few catalogue conventions spelled out on their own (also covered by the grid test)."""

    def grad(key, x, **params):
        return ops.get(key).surrogate_grad(tf.constant(x, tf.float32), **params).numpy().astype(np.float64)

    np.testing.assert_array_equal(grad("ste_sign", [-1.0, 1.0, 1.0000001]), [1.0, 1.0, 0.0])  # closed box
    np.testing.assert_array_equal(grad("rect", [-0.25, 0.25, 0.2499999], alpha=2.0), [0.0, 0.0, 2.0])  # open box
    np.testing.assert_array_equal(grad("piecewise_leaky_relu", [1.0, 0.5], w=1.0, c=0.25), [0.25, 0.5])
    np.testing.assert_array_equal(grad("relu_at_zero", [0.0], at_zero=0.25), [0.25])
    np.testing.assert_array_equal(grad("safe_norm", [0.0]), [0.0])
    np.testing.assert_array_equal(grad("dorefa", [0.0, 1.0, -1e-3, 1.001]), [1.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(grad("leaky_clip", [-1.0, 1.0, 1.5], leak=0.25), [1.0, 1.0, 0.25])
    np.testing.assert_array_equal(grad("clip_gradient", [0.3, 0.3], upstream=3.0), [1.0, 1.0])


# -- true gradient (autodiff of the plain forward) -----------------------------------------------


@pytest.mark.parametrize(("key", "set_name", "dtype"), _cases())
def test_true_gradient_matches_catalogue_expectation(key, set_name, dtype):
    spec, ref = ops.get(key), reference_for(key)
    params = param_sets(key)[set_name]
    x = _grid(key, set_name, dtype)
    x_tensor = tf.constant(x)
    upstream = 0.5
    with tf.GradientTape() as tape:
        tape.watch(x_tensor)
        y = spec.forward(x_tensor, **params)
    grad = tape.gradient(y, x_tensor, output_gradients=tf.fill(tf.shape(y), tf.constant(upstream, y.dtype)))
    if ref.true_grad == "none":
        assert grad is None, f"{key}: a tf.cast / tf.round forward should have no gradient, got {grad}"
    elif ref.true_grad == "zero":
        assert grad is not None, f"{key}: a tf.sign forward should give a zero gradient, got None"
        np.testing.assert_array_equal(grad.numpy(), np.zeros_like(x))
    else:
        assert grad is not None
        expected = ref.true_grad(x, np.full_like(x, upstream), params)
        rtol, atol = tolerances(dtype, scale=_peak(expected))
        assert_close(grad.numpy(), expected, x, rtol=rtol, atol=atol, what=f"{key} {set_name} {dtype} true gradient")


def test_relu_at_zero_true_gradient_at_zero_is_one_custom_is_at_zero():
    spec = ops.get("relu_at_zero")
    x = tf.constant([0.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        true_y = spec.forward(x, at_zero=0.25)
        custom_y = spec.apply(x, at_zero=0.25)
    assert tape.gradient(true_y, x).numpy().tolist() == [1.0]  # tf.maximum sends the tie to its first argument
    assert tape.gradient(custom_y, x).numpy().tolist() == [0.25]


# -- smooth primitives: the surrogate is the derivative of a smooth function ---------------------

# (primitive F(z, params) with F' = g, steepness of F, has a |z| cusp at 0), from SpikingJelly's primitives.
PRIMITIVES = {
    "atan": (lambda z, q: np.arctan(math.pi * q["alpha"] * z / 2) / math.pi + 0.5, lambda q: q["alpha"], False),
    "sigmoid": (lambda z, q: 1 / (1 + np.exp(-q["slope"] * z)), lambda q: q["slope"], False),
    "gaussian": (lambda z, q: (1 + np.vectorize(math.erf)(q["alpha"] * z)) / 2, lambda q: q["alpha"], False),
    "exponential": (
        lambda z, q: np.where(
            z < 0, 0.5 * np.exp(q["alpha"] * np.minimum(z, 0)), 1 - 0.5 * np.exp(-q["alpha"] * np.maximum(z, 0))
        ),
        lambda q: q["alpha"],
        True,
    ),
    "softsign": (lambda z, q: 0.5 * (q["alpha"] * z / (1 + np.abs(q["alpha"] * z)) + 1), lambda q: q["alpha"], True),
    "q_pseudo_spike": (
        lambda z, q: np.where(
            z >= 0,
            1 - 0.5 * (1 + 2 * np.abs(z) / (q["alpha"] - 1)) ** (1 - q["alpha"]),
            0.5 * (1 + 2 * np.abs(z) / (q["alpha"] - 1)) ** (1 - q["alpha"]),
        ),
        lambda q: 2 * q["alpha"] / (q["alpha"] - 1),
        True,
    ),
}


@pytest.mark.parametrize(
    ("key", "set_name"), [pytest.param(k, s, id=f"{k}-{s}") for k in PRIMITIVES for s in param_sets(k)]
)
def test_smooth_surrogate_is_derivative_of_its_primitive(key, set_name):
    primitive, steepness, has_cusp = PRIMITIVES[key]
    params = param_sets(key)[set_name]
    threshold = params["threshold"]
    step = 1e-4 / steepness(params)  # well below 1e-3 / steepness
    z = np.linspace(-3.0, 3.0, 241)
    if has_cusp:
        z = z[np.abs(z) > 10 * step]
    x = z + threshold
    x_tensor = tf.constant(x, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x_tensor)
        y = ops.get(key).apply(x_tensor, **params)
    grad = tape.gradient(y, x_tensor).numpy()
    central = (primitive(x + step - threshold, params) - primitive(x - step - threshold, params)) / (2 * step)
    assert_close(
        grad,
        central,
        x,
        rtol=1e-6,
        atol=1e-9 * _peak(central),
        what=f"{key} {set_name}: surrogate vs central difference of the primitive",
    )


# -- stability ops: custom gradient = the true derivative where that is finite -------------------


@pytest.mark.parametrize(
    ("key", "set_name"), [("log1pexp", "default"), ("safe_norm", "default"), ("safe_norm", "nondefault")]
)
def test_stability_gradient_equals_central_difference_of_forward(key, set_name):
    spec = ops.get(key)
    params = param_sets(key)[set_name]
    x = np.linspace(-30.0, 30.0, 601)
    x = x[np.abs(x) > 1e-3]  # away from safe_norm's point at 0
    step = 1e-5
    x_tensor = tf.constant(x, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x_tensor)
        y = spec.apply(x_tensor, **params)
    grad = tape.gradient(y, x_tensor).numpy()
    central = (
        spec.forward(tf.constant(x + step), **params).numpy() - spec.forward(tf.constant(x - step), **params).numpy()
    ) / (2 * step)
    assert_close(grad, central, x, rtol=1e-7, atol=1e-9, what=f"{key}: custom gradient vs central difference")


@pytest.mark.parametrize(
    ("key", "x", "dtype", "custom_expected"),
    [
        ("log1pexp", 100.0, tf.float32, 1.0),
        ("log1pexp", 1000.0, tf.float64, 1.0),
        ("safe_norm", 0.0, tf.float32, 0.0),
        ("safe_norm", 0.0, tf.float64, 0.0),
    ],
)
def test_plain_autodiff_is_nan_where_catalogue_says_custom_is_finite(key, x, dtype, custom_expected):
    spec = ops.get(key)
    x_tensor = tf.constant([x], dtype)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x_tensor)
        plain = spec.forward(x_tensor)
        custom = spec.apply(x_tensor)
    assert np.isnan(tape.gradient(plain, x_tensor).numpy()).all(), f"{key} at {x}: plain autodiff should be NaN"
    custom_grad = tape.gradient(custom, x_tensor).numpy()
    assert np.isfinite(custom_grad).all()
    assert custom_grad.tolist() == [custom_expected]


# -- half precision ----------------------------------------------------------------------------


def _half_grid(key: str, set_name: str, dtype: str) -> np.ndarray:
    """The float32 grid (with the half dtype's declared points) rounded to ``dtype``, as float32."""
    spec = ops.get(key)
    params = param_sets(key)[set_name]
    points = declared_points_via(spec, -POINT_RANGE, POINT_RANGE, dtype, params)
    grid = sweep_grid([p.x for p in points], "float32")
    return np.unique(tf.cast(tf.cast(grid, dtype), tf.float32).numpy())


def _value_and_grad(spec, x, params, upstream):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spec.apply(x, **params)
    return y, tape.gradient(y, x, output_gradients=tf.fill(tf.shape(y), tf.constant(upstream, y.dtype)))


@pytest.mark.parametrize(("key", "set_name", "dtype"), _cases(("float16", "bfloat16")))
def test_half_precision_keeps_dtype_shape_and_matches_float32(key, set_name, dtype):
    spec = ops.get(key)
    params = param_sets(key)[set_name]
    rtol = HALF_TOLERANCE[dtype]
    grid = _half_grid(key, set_name, dtype)
    batch = grid[np.linspace(0, grid.size - 1, 60).astype(int)].reshape(4, 3, 5)
    for values in (grid[grid.size // 2 + 3], grid, batch):  # scalar, vector, batch
        values = np.asarray(values, dtype=np.float32)
        for upstream in (1.0, 3.0):
            y_half, g_half = _value_and_grad(spec, tf.constant(values, dtype), params, upstream)
            y_32, g_32 = _value_and_grad(spec, tf.constant(values, tf.float32), params, upstream)
            for tensor in (y_half, g_half):
                assert tensor.dtype.name == dtype and tensor.shape == values.shape
            what = f"{key} {set_name} {dtype} shape {values.shape} upstream {upstream}"
            y_half64 = tf.cast(y_half, tf.float64).numpy()
            g_half64 = tf.cast(g_half, tf.float64).numpy()
            y_ref, g_ref = y_32.numpy().astype(np.float64), g_32.numpy().astype(np.float64)
            tiny = 1e-3 * max(1.0, _peak(np.atleast_1d(g_ref)))
            assert_close(y_half64, y_ref, values, rtol=rtol, atol=rtol * tiny, what=f"{what} forward")
            assert_close(g_half64, g_ref, values, rtol=rtol, atol=rtol * tiny, what=f"{what} gradient")


# -- compiled == eager; parameter changes do not retrace ---------------------------------------


def _param_triplet(key: str) -> list[dict[str, float]]:
    """Default, the non-default set, and each parameter half way between its low and its default."""
    spec = ops.get(key)
    low_side = {}
    for p in spec.params:
        value = (p.low + p.default) / 2
        low_side[p.name] = float(math.floor(value)) if p.integer else value
    return [dict(spec.defaults()), dict(reference_for(key).nondefault or spec.defaults()), low_side]


@pytest.mark.parametrize("key", OP_KEYS)
def test_eager_function_and_xla_agree_and_trace_once(key):
    spec = ops.get(key)
    x = tf.constant(_grid(key, "default", "float32"))
    upstream = tf.linspace(-2.0, 3.0, x.shape[0])  # a non-constant upstream gradient
    trace_count = {"n": 0}

    def value_and_grad(x, upstream, params):
        trace_count["n"] += 1
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.apply(x, **params)
        return y, tape.gradient(y, x, output_gradients=upstream)

    for jit_compile in (False, True):
        compiled = tf.function(value_and_grad, jit_compile=jit_compile)
        trace_count["n"] = 0
        for params in _param_triplet(key):
            tensor_params = {k: tf.constant(v, tf.float32) for k, v in params.items()}
            y_compiled, g_compiled = compiled(x, upstream, tensor_params)
            traces = trace_count["n"]
            y_eager, g_eager = value_and_grad(x, upstream, params)
            trace_count["n"] = traces
            what = f"{key} jit_compile={jit_compile} params={params}"
            assert_close(y_compiled.numpy(), y_eager.numpy(), x.numpy(), rtol=1e-6, atol=1e-6, what=f"{what} forward")
            assert_close(g_compiled.numpy(), g_eager.numpy(), x.numpy(), rtol=1e-6, atol=1e-6, what=f"{what} gradient")
            expected = reference_for(key).custom_grad(x.numpy(), upstream.numpy(), params)
            assert_close(
                g_compiled.numpy(),
                expected,
                x.numpy(),
                rtol=1e-6,
                atol=1e-6 * max(1.0, _peak(expected)),
                what=f"{what} gradient vs reference (parameter tensors are used, not stale)",
            )
        assert trace_count["n"] == 1, f"{key} jit_compile={jit_compile}: traced {trace_count['n']} times"
