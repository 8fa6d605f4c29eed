"""The expression language: values against NumPy formulas written here, and user ops end to end."""

import importlib.util
import itertools
import json
import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import ops
from explorer import expr
from explorer.expr import ExpressionError

K = 1.5  # the parameter value used by the value table
GRID = np.array([-2.5, -1.5, -1.0, -0.5, 0.0, 0.3, 0.5, 1.0, 1.5, 2.5])
_erf = np.vectorize(math.erf)

# (expression in x and k, independent NumPy reference). Together they use every function.
VALUE_TABLE = [
    ("abs(x)", lambda x: np.abs(x)),
    ("exp(x)", lambda x: np.exp(x)),
    ("log(x)", lambda x: np.log(x)),
    ("log1p(x)", lambda x: np.log1p(x)),
    ("sqrt(x)", lambda x: np.sqrt(x)),
    ("sin(x) + cos(x)", lambda x: np.sin(x) + np.cos(x)),
    ("tanh(x)", lambda x: np.tanh(x)),
    ("sigmoid(k * x)", lambda x: 1.0 / (1.0 + np.exp(-K * x))),
    ("erf(x)", lambda x: _erf(x)),
    ("sign(x)", lambda x: np.array([-1, -1, -1, -1, 0, 1, 1, 1, 1, 1], float)),
    ("floor(x)", lambda x: np.array([-3, -2, -1, -1, 0, 0, 0, 1, 1, 2], float)),
    # round half to even, like tf.round
    ("round(x)", lambda x: np.array([-2, -2, -1, -0.0, 0, 0, 0, 1, 2, 2], float)),
    ("where(x > 0, x, -k)", lambda x: np.where(x > 0, x, -K)),
    ("minimum(x, k) + maximum(x, -k)", lambda x: np.minimum(x, K) + np.maximum(x, -K)),
    ("clip(x, -1, k)", lambda x: np.minimum(np.maximum(x, -1.0), K)),
    ("x + 1 - 2 * x / 4", lambda x: x + 1 - x / 2),
    ("-x ** 2", lambda x: -(x**2)),
    ("2 ** 3 * x", lambda x: 8 * x),
    ("x ** -1", lambda x: 1 / x),
    ("x ** k", lambda x: np.power(x, K)),
    ("+x * -k", lambda x: -K * x),
    (
        "(x >= 0.5) + 2 * (x < -1) + 4 * (x == 0) + 8 * (x != 1) + 16 * (x <= -1)",
        lambda x: (x >= 0.5) + 2.0 * (x < -1) + 4.0 * (x == 0) + 8.0 * (x != 1) + 16.0 * (x <= -1),
    ),
    ("0 < x <= 1", lambda x: ((x > 0) & (x <= 1)).astype(float)),
    ("pi * e * x", lambda x: math.pi * math.e * x),
    ("1", lambda x: np.ones_like(x)),
    ("k / 3", lambda x: np.full_like(x, K / 3)),
    ("where(1, x, 0)", lambda x: x),
    ("where(x, 2, 3)", lambda x: np.where(x != 0, 2.0, 3.0)),
    ("where(k > 1, 1, 0)", lambda x: np.ones_like(x)),
    ("clip(1, x, 2)", lambda x: np.minimum(np.maximum(1.0, x), 2.0)),
    ("1 / (k * abs(x) + 1) ** 2", lambda x: 1 / (K * np.abs(x) + 1) ** 2),
    ("1e-3 * x", lambda x: 0.001 * x),
]
TABLE_IDS = [text for text, _ in VALUE_TABLE]


def load_source(tree, directory, module_name):
    """Import the exported source the way the code exporter will: a module defining f(x, k)."""
    path = directory / f"{module_name}.py"
    path.write_text(f"import tensorflow as tf\n\n\ndef f(x, k):\n    return {expr.to_python_source(tree)}\n")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def test_value_table_uses_every_function():
    used = {name for text, _ in VALUE_TABLE for name in expr.FUNCTIONS if f"{name}(" in text}
    assert used == set(expr.FUNCTIONS)


@pytest.mark.parametrize(("text", "reference"), VALUE_TABLE, ids=TABLE_IDS)
def test_tensorflow_numpy_and_exported_source_match_numpy_formula(text, reference, tmp_path):
    tree = expr.parse(text, ["k"])
    x = tf.constant(GRID, tf.float64)
    k = tf.constant(K, tf.float64)
    with np.errstate(all="ignore"):
        want = np.broadcast_to(reference(GRID), GRID.shape)
        got_tf = expr.to_tf(tree, x, {"k": K}).numpy()
        got_np = expr.to_numpy(tree, GRID, {"k": K})
        got_source = load_source(tree, tmp_path, "exported")(x, k).numpy()
    for got in (got_tf, got_np, got_source):
        assert got.shape == GRID.shape and got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(got_tf), np.signbit(got_source))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("text", ["1", "k", "where(k > 1, 2, 0)", "x", "where(x > 0, 1, 0)"])
def test_result_keeps_shape_and_dtype_of_x(text, dtype):
    x = tf.reshape(tf.range(-3, 3, dtype=dtype), (2, 3))
    result = expr.to_tf(expr.parse(text, ["k"]), x, {"k": 1.5})
    assert result.shape == (2, 3) and result.dtype == x.dtype
    assert expr.to_numpy(expr.parse(text, ["k"]), x.numpy(), {"k": 1.5}).dtype == np.dtype(dtype)


def test_constant_gradient_expression_is_shaped_like_x():
    spec = expr.compile_op("constant_grad", "x", "2")
    x = tf.zeros((4, 5), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spec.apply(x)
    grad = tape.gradient(y, x)
    assert grad.shape == (4, 5) and grad.dtype == tf.float32
    np.testing.assert_array_equal(grad.numpy(), np.full((4, 5), 2.0))


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [("x + y", 5, "y"), ("abs(x) + open(x)", 10, "open(x)"), ("x // 2", 1, "x // 2"), ("1 + х", 5, "х")],
)
def test_rejection_names_the_column_and_the_text(text, column, fragment):
    with pytest.raises(ExpressionError) as info:
        expr.parse(text, expression="gradient")
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.expression, error.column, error.fragment) == ("gradient", column, fragment)
    assert f"column {column}" in str(error) and "not allowed" in str(error)


@pytest.mark.parametrize(
    ("text", "given"),
    [("clip(x, 1)", 2), ("minimum(x)", 1), ("maximum(x, 1, 2)", 3), ("where(x > 0, 1)", 2), ("abs()", 0)],
)
def test_wrong_argument_count_names_the_call_and_the_signature(text, given):
    function = expr.FUNCTIONS[text.split("(")[0]]
    with pytest.raises(ExpressionError, match="not allowed") as info:
        expr.parse(text, ["k"])
    error = info.value
    assert (error.column, error.fragment) == (1, text)
    assert function.signature in error.reason
    assert {str(function.arity), str(given)} <= set(re.findall(r"\d+", error.reason.split(function.signature)[0]))


@pytest.mark.parametrize(
    ("text", "value", "column", "fragment"),
    [("x ** 17", 17, 6, "17"), ("x ** -16.5", -16.5, 6, "-16.5"), ("9 ** 9 ** 9", 9**9, 6, "9 ** 9")],
)
def test_too_large_exponent_names_its_value_and_the_limit(text, value, column, fragment):
    with pytest.raises(ExpressionError, match="not allowed") as info:
        expr.parse(text)
    error = info.value
    assert (error.column, error.fragment) == (column, fragment)
    assert f"{value:g}" in error.reason and f"{expr.MAX_EXPONENT:g}" in error.reason


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x ** x", "exponent that depends on x"),
        ("x ** (2 * k)", "this exponent"),
        ("abs", "without a call"),
    ],
)
def test_rejection_messages(text, message):
    with pytest.raises(ExpressionError, match="not allowed") as info:
        expr.parse(text, ["k"])
    assert message in str(info.value)


def test_unknown_name_is_named_with_every_allowed_name():
    with pytest.raises(ExpressionError, match="not allowed") as info:
        expr.parse("x + zeta", ["k"])
    error = info.value
    assert error.fragment == "zeta"
    allowed = error.reason.split("zeta")[1]
    assert all(re.search(rf"\b{name}\b", allowed) for name in ["x", "k", *expr.CONSTANTS])


def test_unknown_function_is_named_with_every_function_of_the_table():
    with pytest.raises(ExpressionError, match="not allowed") as info:
        expr.parse("atan2(x, 1)")
    error = info.value
    assert error.fragment == "atan2(x, 1)" and "'atan2'" in error.reason
    listed = re.findall(r"\w+", error.reason.split("'atan2'")[1])
    assert set(expr.FUNCTIONS) <= set(listed)


def test_largest_allowed_sizes_parse():
    assert expr.parse("x ** 16") is not None and expr.parse("x ** -16") is not None
    depth_30 = "abs(" * 29 + "x" + ")" * 29  # 29 calls around x: depth 30
    expr.parse(depth_30)
    with pytest.raises(ExpressionError, match="nested more than 30"):
        expr.parse("-" + depth_30)
    expr.parse("x" + " " * 499)  # 500 characters


# -- user ops ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spike():
    return expr.compile_op(
        "user_spike", "where(x > 0, 1, 0)", "1 / (k * abs(x) + 1) ** 2", params={"k": (25.0, 1.0, 100.0)}, points=[0.0]
    )


def test_compiled_op_is_an_opspec(spike):
    assert isinstance(spike, ops.OpSpec)
    assert (spike.key, spike.builtin, spike.family) == ("user_spike", False, "override")
    assert spike.params == (ops.Param("k", 25.0, 1.0, 100.0, help=spike.params[0].help),)
    assert spike.resolve() == {"k": 25.0}
    with pytest.raises(ValueError, match="k"):
        spike.resolve(k=500.0)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_forward_and_gradient_match_numpy(spike, dtype):
    values = np.array([[-2.0, -0.5, 0.0], [0.25, 0.5, 2.0]])
    upstream = np.array([[1.0, 2.0, -1.0], [0.5, 1.0, 3.0]])
    x = tf.constant(values, dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spike.apply(x, k=3.0)
        loss = tf.reduce_sum(y * tf.constant(upstream, dtype))
    grad = tape.gradient(loss, x)
    expected_grad = upstream / (3.0 * np.abs(values) + 1) ** 2
    tolerance = {"float16": 2e-3, "float32": 1e-6, "float64": 1e-12}[dtype]
    assert y.dtype == x.dtype and y.shape == x.shape
    assert grad.dtype == x.dtype and grad.shape == x.shape
    np.testing.assert_array_equal(y.numpy(), (values > 0).astype(dtype))
    np.testing.assert_array_equal(spike.forward(x, k=3.0).numpy(), (values > 0).astype(dtype))
    np.testing.assert_allclose(grad.numpy().astype(float), expected_grad, rtol=tolerance)
    np.testing.assert_allclose(
        spike.surrogate_grad(x, 1.0, k=3.0).numpy().astype(float), 1 / (3.0 * np.abs(values) + 1) ** 2, rtol=tolerance
    )


def test_true_gradient_of_a_step_forward_is_none(spike):
    x = tf.constant([-1.0, 1.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spike.forward(x)
    assert tape.gradient(y, x) is None  # like tf.cast(x > t): "no gradient"


def test_true_gradient_is_autodiff_of_forward():
    spec = expr.compile_op("cube", "x ** 3 / 3 + k * sin(x)", "1", params={"k": (2.0, 0.0, 4.0)})
    values = np.array([-1.5, 0.0, 0.7, 2.0])
    x = tf.constant(values, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spec.forward(x, k=0.5)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), values**2 + 0.5 * np.cos(values), rtol=1e-12)


def test_works_in_jit_compiled_function(spike):
    @tf.function(jit_compile=True)
    def forward_and_gradient(x, k):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spike.apply(x, k=k)
        return y, tape.gradient(y, x)

    values = np.array([-1.0, 0.0, 0.5], np.float32)
    for k in (2.0, 10.0):
        y, grad = forward_and_gradient(tf.constant(values), tf.constant(k))
        np.testing.assert_array_equal(y.numpy(), (values > 0).astype(np.float32))
        np.testing.assert_allclose(grad.numpy(), 1 / (k * np.abs(values) + 1) ** 2, rtol=1e-6)
    assert forward_and_gradient.experimental_get_tracing_count() == 1


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
@pytest.mark.parametrize(("gradient", "first_kernel_changes"), [("custom", True), ("true", False)])
def test_surrogate_layer_trains_one_step(spike, gradient, first_kernel_changes):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(3),
            ops.SurrogateLayer(op=spike, gradient=gradient, k=5.0),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    inputs = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    targets = inputs.sum(axis=1, keepdims=True)
    w1, b1, w2, b2 = (w.copy() for w in model.get_weights())
    history = model.fit(inputs, targets, epochs=1, batch_size=16, verbose=0)
    # the step by hand in NumPy: h = x W1 + b1, s = H(h), y = s W2 + b2, L = mean((y - t)^2); the surrogate passes
    # dL/ds * 1 / (k |h| + 1)^2 to h (custom), the step's true derivative 0 passes nothing (true)
    h = inputs.astype(np.float64) @ w1 + b1
    y = (h > 0) @ w2 + b2
    assert history.history["loss"][0] == pytest.approx(np.mean((y - targets) ** 2), rel=1e-5)
    through = 1.0 / (5.0 * np.abs(h) + 1.0) ** 2 if first_kernel_changes else np.zeros_like(h)
    d_h = (2.0 * (y - targets) / len(inputs)) @ w2.T * through
    np.testing.assert_allclose(model.layers[0].kernel.numpy(), w1 - 0.1 * inputs.T @ d_h, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(model.layers[0].bias.numpy(), b1 - 0.1 * d_h.sum(axis=0), rtol=1e-4, atol=1e-6)


def test_nan_gradient_compiles_and_is_nan_where_numpy_is():
    spec = expr.compile_op("log_grad", "x", "log(x)")
    values = np.array([-1.0, 1.0, np.e])
    grad = spec.surrogate_grad(tf.constant(values, tf.float64)).numpy()
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(grad, np.log(values), equal_nan=True)
    assert np.isnan(grad[0])


def test_declared_points_numbers_expressions_and_kinds():
    spec = expr.compile_op(
        "pointy",
        "where(x > k, 1, 0)",
        "maximum(0, 1 - abs(x))",
        params={"k": (2.0, 0.0, 4.0)},
        points=[0, "k", "-1/k", ("2 * k", "kink"), {"x": -3, "kind": "boundary"}],
    )
    found = spec.points(-10, 10, k=2.0)
    assert [(p.x, p.kind) for p in found] == [
        (-3.0, "boundary"),
        (-0.5, "jump"),
        (0.0, "jump"),
        (2.0, "jump"),
        (4.0, "kink"),
    ]
    assert {p.note for p in found} == {"declared by the user"}
    assert [p.x for p in spec.points(-1, 1, k=2.0)] == [-0.5, 0.0]
    # -1/k has no finite value at k = 0: the point is left out, the others stay
    assert [p.x for p in spec.points(-10, 10, k=0.0)] == [-3.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("points", "label", "message"),
    [
        (["x"], "points[0]", "must not depend on x"),
        ([0, "1/k"], "points[1]", "not a finite number"),
        ([(0, "cliff")], "points[0]", "kind 'cliff'"),
        ([float("inf")], "points[0]", "finite number"),
        ([True], "points[0]", "finite number"),
        (["open('f')"], "points[0]", "calling 'open'"),
    ],
)
def test_bad_points_are_rejected(points, label, message):
    with pytest.raises(ExpressionError) as info:
        expr.compile_op("p", "x", "1", params={"k": (0.0, -1.0, 1.0)}, points=points)
    assert info.value.expression == label and message in str(info.value)


@pytest.mark.parametrize(
    ("params", "label", "message"),
    [
        ({"a": (1, 0, 2), "b": (1, 0, 2), "c": (1, 0, 2), "d": (1, 0, 2)}, "params", "at most 3"),
        ({"x": (1, 0, 2)}, "params", "'x'"),
        ({"pi": (1, 0, 2)}, "params", "'pi'"),
        ({"exp": (1, 0, 2)}, "params", "'exp'"),
        ({"lambda": (1, 0, 2)}, "params", "'lambda'"),
        ({"__class__": (1, 0, 2)}, "params", "'__class__'"),
        ({"k-1": (1, 0, 2)}, "params", "'k-1'"),
        ({"k": (3, 0, 2)}, "k", "default 3 is outside [0, 2]"),
        ({"k": (1, 2, 2)}, "k", "low (2) must be below high (2)"),
        ({"k": (1, 0, math.inf)}, "k", "finite"),
        ({"k": (math.nan, 0, 1)}, "k", "finite"),
        ({"k": (True, 0, 1)}, "k", "numbers"),
        ({"k": (1, 0)}, "k", "(default, low, high)"),
        ({"k": "102"}, "k", "(default, low, high)"),
    ],
)
def test_bad_params_are_rejected(params, label, message):
    with pytest.raises(ExpressionError) as info:
        expr.compile_op("p", "x", "1", params=params)
    assert info.value.expression == label and message in str(info.value)


@pytest.mark.parametrize("name", ["", "1abc", "has space", "__class__", "a" * 41, "atan", None, "näme"])
def test_bad_op_names_are_rejected(name):
    with pytest.raises(ExpressionError) as info:
        expr.compile_op(name, "x", "1")
    assert info.value.expression == "name"


def test_parameter_exponent_range_is_checked():
    expr.compile_op("ok_power", "x", "(1 + abs(x)) ** -k", params={"k": (2.0, 1.0, 16.0)})
    with pytest.raises(ExpressionError, match=r"range \[1, 20\]") as info:
        expr.compile_op("big_power", "x", "(1 + abs(x)) ** -k", params={"k": (2.0, 1.0, 20.0)})
    assert info.value.expression == "gradient"


def test_forward_and_gradient_errors_name_their_expression():
    with pytest.raises(ExpressionError) as forward_error:
        expr.compile_op("bad", "x.real", "1")
    with pytest.raises(ExpressionError) as gradient_error:
        expr.compile_op("bad", "x", "1 +")
    assert forward_error.value.expression == "forward" and gradient_error.value.expression == "gradient"


def test_source_round_trips_through_json():
    original = expr.compile_op(
        "trip",
        "clip(x, -a, a)",
        "where(abs(x) <= a, 1, b)",
        params={"a": (1.0, 0.5, 2.0), "b": (0.1, 0.0, 1.0)},
        points=["a", ("-a", "boundary")],
    )
    source = json.loads(json.dumps(original.source))
    assert set(source) == {"forward", "gradient", "params", "points"}
    rebuilt = expr.compile_op(original.key, **source)
    x = tf.constant(np.linspace(-3, 3, 13), tf.float32)
    for a, b in itertools.product((0.5, 1.5), (0.0, 0.3)):
        np.testing.assert_array_equal(original.apply(x, a=a, b=b).numpy(), rebuilt.apply(x, a=a, b=b).numpy())
        np.testing.assert_array_equal(
            original.surrogate_grad(x, a=a, b=b).numpy(), rebuilt.surrogate_grad(x, a=a, b=b).numpy()
        )
        assert rebuilt.points(-3, 3, a=a, b=b) == original.points(-3, 3, a=a, b=b)
    # the clip boundary is closed: the gradient passes AT |x| = a, the leak b only outside
    grad = original.surrogate_grad(tf.constant([-1.5, -1.0, 1.0, 1.01]), a=1.0, b=0.25).numpy()
    np.testing.assert_allclose(grad, [0.25, 1.0, 1.0, 0.25])


def test_evaluate_number_uses_float64_and_parameters():
    assert expr.evaluate_number(expr.parse("-1/k", ["k"], allow_x=False), {"k": 4.0}) == -0.25
    assert expr.evaluate_number(expr.parse("2 * pi")) == 2 * math.pi
    assert math.isinf(expr.evaluate_number(expr.parse("1 / 0")))


# The LaTeX of every table expression, written by hand: functions LaTeX knows as \exp, \log, \sin, \cos,
# \tanh, \min, \max, \sqrt; the others as \operatorname; sigmoid as sigma; where() as cases (a condition
# that is a bare value reads "!= 0"); comparisons as Iverson brackets; * as \cdot; / as \frac.
LATEX = {
    "abs(x)": r"\left|x\right|",
    "exp(x)": r"\exp\left(x\right)",
    "log(x)": r"\log\left(x\right)",
    "log1p(x)": r"\operatorname{log1p}\left(x\right)",
    "sqrt(x)": r"\sqrt{x}",
    "sin(x) + cos(x)": r"\sin\left(x\right) + \cos\left(x\right)",
    "tanh(x)": r"\tanh\left(x\right)",
    "sigmoid(k * x)": r"\sigma\left(k \cdot x\right)",
    "erf(x)": r"\operatorname{erf}\left(x\right)",
    "sign(x)": r"\operatorname{sign}\left(x\right)",
    "floor(x)": r"\operatorname{floor}\left(x\right)",
    "round(x)": r"\operatorname{round}\left(x\right)",
    "where(x > 0, x, -k)": r"\begin{cases} x & x > 0 \\ -k & \text{otherwise} \end{cases}",
    "minimum(x, k) + maximum(x, -k)": r"\min\left(x, k\right) + \max\left(x, -k\right)",
    "clip(x, -1, k)": r"\operatorname{clip}\left(x, -1, k\right)",
    "x + 1 - 2 * x / 4": r"x + 1 - \frac{2 \cdot x}{4}",
    "-x ** 2": r"-x^{2}",  # minus binds looser than the power, in Python and in LaTeX
    "2 ** 3 * x": r"2^{3} \cdot x",
    "x ** -1": r"x^{-1}",
    "x ** k": r"x^{k}",
    "+x * -k": r"+x \cdot -k",
    "(x >= 0.5) + 2 * (x < -1) + 4 * (x == 0) + 8 * (x != 1) + 16 * (x <= -1)": (
        r"[\,x \ge 0.5\,] + 2 \cdot [\,x < -1\,] + 4 \cdot [\,x = 0\,] + 8 \cdot [\,x \ne 1\,] + 16 \cdot [\,x \le -1\,]"
    ),
    "0 < x <= 1": r"[\,0 < x \le 1\,]",
    "pi * e * x": r"\pi \cdot e \cdot x",
    "1": "1",
    "k / 3": r"\frac{k}{3}",
    "where(1, x, 0)": r"\begin{cases} x & 1 \ne 0 \\ 0 & \text{otherwise} \end{cases}",
    "where(x, 2, 3)": r"\begin{cases} 2 & x \ne 0 \\ 3 & \text{otherwise} \end{cases}",
    "where(k > 1, 1, 0)": r"\begin{cases} 1 & k > 1 \\ 0 & \text{otherwise} \end{cases}",
    "clip(1, x, 2)": r"\operatorname{clip}\left(1, x, 2\right)",
    "1 / (k * abs(x) + 1) ** 2": r"\frac{1}{\left(k \cdot \left|x\right| + 1\right)^{2}}",
    "1e-3 * x": r"0.001 \cdot x",
}


def test_latex_is_written_for_every_table_expression():
    assert set(LATEX) == set(TABLE_IDS)


@pytest.mark.parametrize("text", TABLE_IDS)
def test_latex_renders_every_table_expression(text):
    assert expr.to_latex(expr.parse(text, ["k"])) == LATEX[text]
