"""The function table is the single source: every entry works in the validator, every back end,
LaTeX, the exporter and the help, and a new entry is all it takes to add a function."""

import functools
import importlib
import importlib.util
import math

import numpy as np
import pytest
import tensorflow as tf

from explorer import export, expr
from explorer.expr.functions import CONDITION, Function

GRID = np.linspace(-2.5, 2.5, 41)  # has 0 and the halves (round's ties)
VALUE_ARGUMENTS = ["x", "0.5 - x", "x * x - 1"]
FUNCTION_NAMES = list(expr.FUNCTIONS)


def call_text(function):
    """``name(...)`` with one argument per declared argument; a condition argument gets a comparison."""
    values = iter(VALUE_ARGUMENTS)
    return f"{function.name}({', '.join('x > 0.25' if arg == CONDITION else next(values) for arg in function.args)})"


def resolve(source_text, module, name):
    """The object a table source text such as ``tf.math.log`` names, without evaluating it."""
    head, *path = source_text.split(".")
    assert head == name, source_text
    return functools.reduce(getattr, path, module)


def load_tf_source(text, directory, module_name):
    path = directory / f"{module_name}.py"
    path.write_text(f"import tensorflow as tf\n\n\ndef f(x):\n    return {text}\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def numpy_source_values(tree, x):
    """Our own generated NumPy text, evaluated with the helpers it needs (test code, not user text)."""
    imports, helpers = expr.numpy_helpers(tree)
    namespace = {"np": np, **{module: importlib.import_module(module) for module in imports}}
    for helper in helpers:
        exec(helper, namespace)
    namespace.update(x=x, _D=x.dtype.type)
    with np.errstate(all="ignore"):
        return np.broadcast_to(eval(expr.to_numpy_source(tree), namespace), x.shape)


def test_every_entry_is_well_formed():
    for name, function in expr.FUNCTIONS.items():
        assert function.name == name and function.meaning and function.args
        assert len(set(function.args)) == function.arity
        if function.expansion:
            assert CONDITION not in function.args  # an expansion binds values, not conditions
            expr.parse(function.expansion, function.args, expression=f"{name} expansion", allow_x=False)
        else:
            assert function.tf is not None and function.numpy is not None
            assert resolve(function.tf_source, tf, "tf") is function.tf
            if function.numpy_helper:
                assert f"def {function.numpy_source}(" in function.numpy_helper
            else:
                assert resolve(function.numpy_source, np, "np") is function.numpy


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_validator_takes_exactly_the_declared_arity(name):
    function = expr.FUNCTIONS[name]
    expr.parse(call_text(function))
    for count in (function.arity - 1, function.arity + 1):
        text = f"{name}({', '.join(['x'] * count)})"
        with pytest.raises(expr.ExpressionError, match="not allowed") as info:
            expr.parse(text)
        assert function.signature in info.value.reason


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_every_back_end_computes_the_same_values(name, dtype, tmp_path):
    """TensorFlow, NumPy, the exported TensorFlow source and the NumPy source of the exported tests."""
    tree = expr.parse(call_text(expr.FUNCTIONS[name]))
    x_values = GRID.astype(dtype)
    x = tf.constant(x_values)
    rtol = {"float32": 2e-6, "float64": 1e-13}[dtype]
    got_tf = expr.to_tf(tree, x).numpy()
    got_np = expr.to_numpy(tree, x_values)
    got_source = load_tf_source(expr.to_python_source(tree), tmp_path, f"source_{name}_{dtype}")(x).numpy()
    got_np_source = numpy_source_values(tree, x_values)
    for got in (got_np, got_source, got_np_source):
        assert got.shape == x_values.shape and got.dtype == x_values.dtype
        np.testing.assert_allclose(got, got_tf, rtol=rtol, atol=rtol, equal_nan=True)
    assert not np.isnan(got_tf).all()


@pytest.mark.parametrize("name", [name for name, f in expr.FUNCTIONS.items() if not f.expansion])
def test_table_callables_agree(name):
    """The entry's own TensorFlow and NumPy callables, called directly (not through a back end)."""
    function = expr.FUNCTIONS[name]
    values = [GRID, 0.5 - GRID, GRID * GRID - 1]
    args = [GRID > 0.25 if arg == CONDITION else values.pop(0) for arg in function.args]
    with np.errstate(all="ignore"):
        want = np.asarray(function.numpy(*args), dtype=np.float64)
    got = function.tf(*[tf.constant(arg) for arg in args]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, equal_nan=True)


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_every_entry_renders_to_latex_and_source(name):
    function = expr.FUNCTIONS[name]
    tree = expr.parse(call_text(function))
    latex = expr.to_latex(tree)
    assert "$" not in latex and "None" not in latex
    assert "0.25" in latex if CONDITION in function.args else "x" in latex
    source = expr.to_python_source(tree)
    if function.expansion:
        assert f"{name}(" not in source  # expanded, never called by name
    else:
        assert f"{function.tf_source}(" in source
        assert f"{function.numpy_source}(" in expr.to_numpy_source(tree)


def test_help_lists_exactly_the_table():
    rows = expr.help_table()
    assert [row["function"] for row in rows] == [f.signature for f in expr.FUNCTIONS.values()]
    assert [row["function"].split("(")[0] for row in rows] == FUNCTION_NAMES
    assert all(row["meaning"] == expr.FUNCTIONS[row["function"].split("(")[0]].meaning for row in rows)


def test_documented_semantics_of_sign_round_and_clip():
    x = tf.constant([-1.5, -0.5, 0.0, 0.5, 1.5, 2.5], tf.float64)
    assert expr.to_tf(expr.parse("sign(x)"), x).numpy().tolist() == [-1, -1, 0, 1, 1, 1]
    assert expr.to_tf(expr.parse("round(x)"), x).numpy().tolist() == [-2, -0.0, 0, 0, 2, 2]
    bounds = tf.constant([-1.0, -0.5, 0.5, 1.0, 1.5], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(bounds)
        y = expr.to_tf(expr.parse("clip(x, -1, 1)"), bounds)
    np.testing.assert_array_equal(tape.gradient(y, bounds).numpy(), [1, 1, 1, 1, 0])  # passes AT both bounds


COSH = Function(
    "cosh",
    ("v",),
    "hyperbolic cosine",
    r"\cosh\left($v\right)",
    tf=tf.cosh,
    tf_source="tf.cosh",
    numpy=np.cosh,
    numpy_source="np.cosh",
)


def test_adding_a_function_is_one_table_entry(monkeypatch, tmp_path):
    """A new entry is accepted by every consumer: validator, back ends, LaTeX, help, compile_op, export."""
    monkeypatch.setitem(expr.FUNCTIONS, "cosh", COSH)
    tree = expr.parse("cosh(k * x)", ["k"])
    x = np.linspace(-2, 2, 9)
    want = np.cosh(1.5 * x)
    np.testing.assert_allclose(expr.to_tf(tree, tf.constant(x), {"k": 1.5}).numpy(), want, rtol=1e-13)
    np.testing.assert_allclose(expr.to_numpy(tree, x, {"k": 1.5}), want, rtol=1e-13)
    assert expr.to_latex(tree) == r"\cosh\left(k \cdot x\right)"
    assert expr.to_python_source(tree) == "tf.cosh(k * x)"
    assert "np.cosh(" in expr.to_numpy_source(tree)
    assert {"function": "cosh(v)", "meaning": "hyperbolic cosine"} in expr.help_table()
    with pytest.raises(expr.ExpressionError, match="'cosh'"):
        expr.compile_op("p", "x", "1", params={"cosh": (1.0, 0.0, 2.0)})  # now a reserved name

    spec = expr.compile_op("hyperbolic", "x", "cosh(k * x)", params={"k": (1.5, 0.5, 2.0)})
    np.testing.assert_allclose(spec.surrogate_grad(tf.constant(x), k=1.5).numpy(), want, rtol=1e-13)
    files = export.files(spec)
    assert "tf.cosh(" in files["hyperbolic_op.py"] and "np.cosh(" in files["test_hyperbolic_op.py"]


def test_a_function_missing_from_the_table_is_rejected():
    """The control for the test above: without its entry, cosh is not part of the language."""
    with pytest.raises(expr.ExpressionError, match="'cosh'"):
        expr.parse("cosh(x)")
    assert math.isfinite(expr.evaluate_number(expr.parse("abs(-2)")))
