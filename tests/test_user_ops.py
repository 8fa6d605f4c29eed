"""ops.from_function: a user's own @tf.custom_gradient function as an op every view accepts.

References are hand-computed: the textbook square's custom gradient is x (half of 2x); the numerical
true gradient is the central difference with h = 1e-5 * max(1, |x|), which at a unit jump is 1 / (2h).
"""

import ast
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import explorer
import ops
from ops import user
from tests.messages import assert_tells


@tf.custom_gradient
def square_with_scaled_grad(x):
    y = x * x

    def grad(dy):
        return dy * (0.5 * 2.0 * x)

    return y, grad


@tf.custom_gradient
def step_with_box(x):
    """[x > 0] with a unit box surrogate on |x| <= 0.5 (spike-style)."""

    def grad(dy):
        return dy * tf.cast(tf.abs(x) <= 0.5, x.dtype)

    return tf.cast(x > 0, x.dtype), grad


@tf.custom_gradient
def keyword_scale(x, slope=25.0):
    def grad(dy):
        return dy * slope

    return x * slope, grad


@tf.custom_gradient
def positional_scale(x, slope=25.0, /):
    def grad(dy):
        return dy * slope, None

    return x * slope, grad


@pytest.fixture(scope="module")
def square_spec():
    return ops.from_function(square_with_scaled_grad)


@pytest.fixture(scope="module")
def square_sweep(square_spec):
    return explorer.sweep(square_spec, -3.0, 3.0, 101, dtype="float64")


def test_a_user_function_is_an_op_of_the_family_yours(square_spec):
    assert square_spec.family == "yours" and "yours" in ops.FAMILIES
    assert square_spec.key == "square_with_scaled_grad" and not square_spec.builtin
    assert square_spec.params == () and square_spec.true_gradient == "numerical"
    assert square_spec.true_gradient_label == "true gradient (numerical)"
    assert square_spec.user_function.fn is square_with_scaled_grad


def test_sweep_shows_forward_custom_and_numerical_true_gradient(square_sweep):
    x = square_sweep["x"].to_numpy()
    np.testing.assert_allclose(square_sweep["forward"], x**2, rtol=0, atol=1e-12)
    np.testing.assert_allclose(square_sweep["custom_grad"], x, rtol=0, atol=1e-12)  # 0.5 * 2x
    np.testing.assert_allclose(square_sweep["true_grad"], 2 * x, rtol=1e-8, atol=1e-9)  # central difference
    assert square_sweep.true_gradient_label == "true gradient (numerical)"
    assert not square_sweep["true_grad_missing"].any()


def test_a_declared_forward_gives_the_autodiff_true_gradient():
    spec = ops.from_function(square_with_scaled_grad, forward=lambda x: x * x)
    assert spec.true_gradient == "autodiff" and spec.true_gradient_label == "true gradient (autodiff)"
    result = explorer.sweep(spec, -2.0, 2.0, 11, dtype="float64")
    np.testing.assert_array_equal(result["true_grad"], 2 * result["x"].to_numpy())


def test_numerical_derivative_spikes_to_one_over_two_steps_at_a_jump():
    spec = ops.from_function(step_with_box, points=[(0.0, "jump", "H(0) = 0")])
    result = explorer.sweep(spec, -1.0, 1.0, 21, dtype="float64")
    frame = result.frame

    def at(x, column):
        return frame[column].iloc[int(np.argmin(np.abs(frame["x"].to_numpy() - x)))]

    assert at(0.0, "true_grad") == pytest.approx(1.0 / (2 * user.NUMERICAL_STEP), rel=1e-9)  # 50000
    assert at(0.0, "forward") == 0.0 and at(0.0, "point") == "jump"
    assert at(0.5, "true_grad") == 0.0 and at(0.5, "custom_grad") == 1.0  # closed box
    assert at(0.6, "custom_grad") == 0.0
    table = explorer.special_points(result)
    # the declared jump is found; the box's edges are detected as undeclared boundaries
    assert list(zip(table["x"], table["kind"], table["status"], strict=True)) == [
        (-0.5, "boundary", "undeclared"),
        (0.0, "jump", "ok"),
        (0.5, "boundary", "undeclared"),
    ]


def test_metrics_and_figures_take_a_user_sweep(square_sweep):
    from explorer.explore.figures import main_figure

    # By hand, for the custom gradient g(x) = x on [-3, 3] (101 points, step 0.06) against 2x:
    # largest |g| first at x = -3; g <= -1.5 on [-3, -1.5] (length 1.5); the integral of x over a
    # symmetric range is 0, as is x^2's change 9 - 9, so nothing to be normalised to; g = 0 only at
    # the single point x = 0 (no zero stretch); |x - 2x| is largest, 3, at x = +-3.
    [row] = explorer.metrics(square_sweep).to_dict("records")
    assert row["op"] == "square_with_scaled_grad"
    assert (row["peak"], row["peak_x"]) == (-3.0, -3.0)
    assert row["fwhm"] == pytest.approx(1.5, abs=1e-12)
    assert row["area"] == pytest.approx(0.0, abs=1e-12)
    assert (row["forward_change"], row["jump"], row["normalised"], row["dead_fraction"]) == (0.0, 0.0, False, 0.0)
    assert row["max_abs_diff"] == pytest.approx(3.0, rel=1e-8)
    figure = main_figure(square_sweep)
    traces = {trace.name: trace for trace in figure.data}
    x = np.linspace(-3.0, 3.0, 101)
    np.testing.assert_allclose(np.asarray(traces["forward"].x, dtype=float), x, atol=1e-12)
    np.testing.assert_allclose(np.asarray(traces["forward"].y, dtype=float), x**2, atol=1e-12)
    np.testing.assert_allclose(np.asarray(traces["custom gradient"].y, dtype=float), x, atol=1e-12)


def test_the_trainer_builds_a_model_with_a_user_op(square_spec):
    from explorer.train import trainer as train

    # y = W2^T op(h) + b2 with h = W1^T x + b1, so dy/dx = W1 (W2 * op'(h)), where op'(h) is the
    # square's custom gradient h in custom mode and its true gradient 2h in true mode.
    x = np.array([[0.5, -1.0]], dtype=np.float32)
    for mode, slope in (("custom", 1.0), ("true", 2.0)):
        model = train.build_model(2, train.Run(square_spec, gradient=mode))
        inputs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            y = model(inputs)
        w1, b1 = (w.numpy().astype(np.float64) for w in model.get_layer("dense_1").weights)
        w2 = model.get_layer(train.OUTPUT_LAYER).weights[0].numpy().astype(np.float64)[:, 0]
        h = x.astype(np.float64) @ w1 + b1
        expected = w1 @ (w2 * slope * h[0])
        np.testing.assert_allclose(tape.gradient(y, inputs).numpy()[0], expected, rtol=1e-5, atol=1e-7)


def test_keyword_parameter_becomes_an_op_parameter_with_the_default_range():
    spec = ops.from_function(keyword_scale)
    (param,) = spec.params
    assert (param.name, param.default, param.low, param.high) == ("slope", 25.0, 2.5, 250.0)
    assert spec.user_function.keyword == ("slope",)
    # inside the sweep's tf.function, with the parameter as a tensor
    result = explorer.sweep(spec, -1.0, 1.0, 11, params={"slope": 10.0})
    np.testing.assert_allclose(result["forward"], 10.0 * result["x"].to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(result["custom_grad"], 10.0)
    np.testing.assert_allclose(result["true_grad"], 10.0, rtol=1e-5)
    with pytest.raises(ValueError) as error:
        spec.resolve(slope=1000.0)
    assert_tells(str(error.value), "slope", bounds=(2.5, 250))


def test_positional_only_parameter_is_passed_positionally():
    spec = ops.from_function(positional_scale)
    assert spec.user_function.positional == ("slope",)
    result = explorer.sweep(spec, -1.0, 1.0, 11, params={"slope": 4.0})
    np.testing.assert_allclose(result["custom_grad"], 4.0)
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spec.user_function.call(x, {"slope": 3.0})
    np.testing.assert_allclose(tape.gradient(y, x), [3.0, 3.0])
    with tf.GradientTape() as tape:  # without a value, its default is still passed (the backward expects it)
        tape.watch(x)
        y = spec.user_function.call(x)
    np.testing.assert_allclose(tape.gradient(y, x), [25.0, 25.0])


@tf.custom_gradient
def negative_default(x, k=-2.0):
    return x * k, lambda dy: dy * k


@tf.custom_gradient
def zero_default(x, k=0.0):
    return x + k, lambda dy: dy


@tf.custom_gradient
def integer_default(x, k=3):
    return x * k, lambda dy: dy * k


@pytest.mark.parametrize(
    "fn,low,high,integer",
    [
        (keyword_scale, 2.5, 250.0, False),
        (negative_default, -20.0, -0.2, False),
        (zero_default, -1.0, 1.0, False),
        (integer_default, 0.0, 30.0, True),
    ],
)
def test_default_ranges(fn, low, high, integer):
    (param,) = ops.from_function(fn).params
    assert (param.low, param.high, param.integer) == (low, high, integer)


def test_declared_ranges_points_title_and_justification():
    spec = ops.from_function(
        keyword_scale, ranges={"slope": (1.0, 100.0)}, title="Scale", justification="because", points=[(0.0, "kink")]
    )
    assert (spec.params[0].low, spec.params[0].high) == (1.0, 100.0)
    assert spec.title == "Scale" and spec.why == "because"
    assert [(p.x, p.kind) for p in spec.points(-1, 1)] == [(0.0, "kink")]
    with pytest.raises(ValueError) as error:
        ops.from_function(keyword_scale, ranges={"slope": (30.0, 100.0)})
    assert_tells(str(error.value), "slope", bounds=(30, 100))
    with pytest.raises(ValueError, match="unknown parameter.*alpha"):
        ops.from_function(keyword_scale, ranges={"alpha": (1.0, 2.0)})
    with pytest.raises(ValueError, match="kind"):
        ops.from_function(keyword_scale, points=[(0.0, "bump")])


def test_only_a_declaration_is_a_justification_a_docstring_is_context(square_spec):
    documented = ops.from_function(step_with_box)
    assert documented.why == ""  # the docstring declares nothing
    assert documented.user_function.docstring == "[x > 0] with a unit box surrogate on |x| <= 0.5 (spike-style)."
    assert ops.from_function(step_with_box, justification="a box surrogate").why == "a box surrogate"
    assert square_spec.why == "" and square_spec.user_function.docstring == ""


class NotAFunction(tf.keras.layers.Layer):
    pass


@pytest.mark.parametrize("candidate", [lambda x: x, tf.square, NotAFunction, tf.function(lambda x: x), 3.0])
def test_refuses_what_is_not_a_custom_gradient_function(candidate):
    with pytest.raises(TypeError) as error:
        ops.from_function(candidate)
    assert "@tf.custom_gradient" in str(error.value)
    assert not ops.is_custom_gradient(candidate)


def test_is_custom_gradient_reads_tensorflows_marker():
    assert ops.is_custom_gradient(square_with_scaled_grad)
    assert ops.is_custom_gradient(tf.function(square_with_scaled_grad))
    assert user.undecorated(square_with_scaled_grad).__name__ == "square_with_scaled_grad"


@tf.custom_gradient
def two_inputs(x, y):
    return x * y, lambda dy: (dy * y, dy * x)


@tf.custom_gradient
def text_default(x, mode="fast"):
    return x, lambda dy: dy


@tf.custom_gradient
def bool_default(x, clip=True):
    return x, lambda dy: dy


def test_every_signature_tensorflow_accepts_is_an_op():
    two = ops.from_function(two_inputs).user_function
    assert two.inputs == ("x", "y") and two.flags == {}
    text = ops.from_function(text_default).user_function
    assert text.inputs == ("x",) and text.flags == {"mode": ("fast",)}
    flag = ops.from_function(bool_default).user_function
    assert flag.flags == {"clip": (True, False)}
    assert flag.flag_settings() == [{"clip": True}, {"clip": False}]


def test_several_inputs_and_flags_are_passed_as_the_signature_asks():
    seen = {}

    @tf.custom_gradient
    def mixed(x, y, scale=2.0, /, *, z, clip=False):
        seen.update(clip=clip, scale=scale)
        return x * y + z, lambda dy: (dy * y, dy * x, None)

    user = ops.from_function(mixed).user_function
    assert user.inputs == ("x", "y", "z") and user.keyword_inputs == ("z",) and user.positional == ("scale",)
    x, y, z = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0]), tf.constant([0.5, 0.5])
    out = user.call_all([x, y, z], {"scale": 3.0}, {"clip": True})
    np.testing.assert_allclose(out.numpy(), [3.5, 8.5])  # 1*3+0.5, 2*4+0.5
    assert seen["clip"] is True and float(seen["scale"]) == 3.0


def test_input_shapes_declaration_is_checked():
    spec = ops.from_function(two_inputs, input_shapes=[((4, 3), (3,)), ((2, 5), (5,))])
    assert spec.user_function.input_shapes == (((4, 3), (3,)), ((2, 5), (5,)))
    with pytest.raises(ValueError, match="one shape .* for each of the 2 input"):
        ops.from_function(two_inputs, input_shapes=[((4, 3),)])


def test_ops_never_imports_explorer():
    for path in Path(ops.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(alias.name.split(".")[0] == "explorer" for alias in node.names), path
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "explorer", path


def test_by_family_lists_only_families_with_built_in_ops():
    assert list(ops.by_family()) == ["spike", "sign", "clip", "override", "stability"]
    assert all(spec.builtin for specs in ops.by_family().values() for spec in specs)
