"""The checker on every custom-gradient signature TensorFlow accepts: several inputs and outputs, reductions,
broadcasting, matrix products, captured variables, flags, a restricted domain.

Each verdict names its check and its input; the numbers the checks rest on are compared with NumPy
formulas written here (the gradients of x * y, a @ b, |x|, sin/cos), not with the checker's own output.
"""

import contextlib
import io
import json
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import ops
from examples.bias_add import bias_add
from examples.binarize import binarize
from examples.gradient_reversal import grad_reverse
from examples.log_sinh import log_sinh
from examples.matmul import matmul
from examples.pitfall_bias_not_reduced import bias_add_unreduced
from examples.pitfall_flag_in_graph import sign_ste
from examples.pitfall_matmul_transpose import matmul_no_transpose
from examples.pitfall_norm_nan import norm_naive_grad
from examples.pitfall_one_gradient import product_one_gradient
from examples.pitfall_variables_keyword import gained
from examples.safe_norm import safe_norm
from examples.scale_by_variable import scale, scaled
from examples.sin_cos import sin_cos
from explorer import testing
from explorer.checker import any_signature, elementwise, guardrail, plan, runner
from explorer.checker.common import Subject
from explorer.testing import GradientCheckWarning
from ops import inputs


def by_name(results):
    return {result.name: result for result in results}


def found_for(fn, **declarations):
    user = ops.from_function(fn, **declarations).user_function
    return user, inputs.find_inputs(user, lambda tensors: user.call_all(tensors))


# -- the example functions compute what they say (independent NumPy references) -----------------------------
def test_the_correct_examples_have_the_textbook_gradients():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(3, 4))
    dy = rng.normal(size=(2, 4))
    ev = any_signature.evaluate(lambda i: matmul(*i), inputs.tensors([a, b], "float64"), [tf.constant(dy)])
    np.testing.assert_allclose(ev.input_grads[0].numpy(), dy @ b.T)
    np.testing.assert_allclose(ev.input_grads[1].numpy(), a.T @ dy)
    x = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]])  # the zero vector: a finite subgradient, 0
    ev = any_signature.evaluate(lambda i: safe_norm(*i), inputs.tensors([x], "float64"))
    np.testing.assert_allclose(ev.outputs[0].numpy(), [5.0, 0.0])
    np.testing.assert_allclose(ev.input_grads[0].numpy(), [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0]])
    x, bias = rng.normal(size=(4, 3)), rng.normal(size=(3,))
    ev = any_signature.evaluate(lambda i: bias_add(*i), inputs.tensors([x, bias], "float64"), 2.0)
    np.testing.assert_allclose(ev.input_grads[1].numpy(), np.full(3, 8.0))  # 4 rows of upstream 2
    t = np.linspace(-1.0, 1.0, 5)
    ev = any_signature.evaluate(lambda i: sin_cos(*i), inputs.tensors([t], "float64"))
    np.testing.assert_allclose(ev.input_grads[0].numpy(), np.cos(t) - np.sin(t))


# -- which input shapes the checker finds ---------------------------------------------------------------------
def test_matmul_is_found_only_by_the_matrix_product_rule_with_three_different_sizes():
    user, found = found_for(matmul)
    assert [a.shapes for a in found.working] == [((2, 3), (3, 4)), ((5, 2), (2, 3))]
    assert {a.rule for a in found.working} == {"matrix product"}
    # every other rule is refused by the forward (a (4, 3) @ (4, 3) product cannot run), and said so
    assert any("(4, 3)" in failure and "forward raised" in failure for failure in found.failures)


def test_a_broadcasting_function_is_checked_at_two_different_rules():
    user, found = found_for(bias_add)
    rules = [a.rule for a in found.working[:2]]
    assert rules == ["every input of one shape", "extra inputs as scalars"]
    assert ((4, 3), (3,)) in [a.shapes for a in found.working]


def test_declared_input_shapes_win():
    user, found = found_for(bias_add, input_shapes=[((6, 2), (2,)), ((3, 7), (7,))])
    assert [a.shapes for a in found.working] == [((6, 2), (2,)), ((3, 7), (7,))]
    assert {a.rule for a in found.working} == {"declared"}
    result = by_name(plan.check_function(ops.from_function(bias_add, input_shapes=[((6, 2), (2,)), ((3, 7), (7,))])))
    assert result["shape_dtype"].level == "pass" and "x (6, 2), bias (2,)" in result["shape_dtype"].message


def test_a_function_whose_inputs_cannot_be_found_is_not_checked_and_fails_saying_how_to_declare_them():
    @tf.custom_gradient
    def needs_seven(x, y):
        """A forward for vectors of 7 only; the backward is wrong whatever it is given: (1000 dy, -5 dy)."""
        return tf.ensure_shape(x, (7,)) * y, lambda dy: (1000.0 * dy, -5.0 * dy)

    results = by_name(plan.check_function(ops.from_function(needs_seven)))
    row = results["shape_dtype"]
    assert row.level == "fail" and row.message.startswith("not checked: no input shapes found that needs_seven accepts")
    assert "input_shapes" in row.message and "GRADIENT_EXPLORER" in row.message
    # nothing was checked, so nothing passes: every row fails and says so
    assert [r.level for r in results.values()] == ["fail"] * len(plan.FUNCTION_CHECKS)
    assert all(r.message.startswith("not checked: ") for r in results.values())
    with pytest.raises(AssertionError, match="9 of 9 checks failed"):
        testing.assert_custom_gradient(needs_seven)
    # declared, it is checked: the backward (1000 dy, -5 dy) is not the product's gradient (dy y, dy x)
    declared = by_name(plan.check_function(ops.from_function(needs_seven, input_shapes=[((7,), (7,))])))
    assert declared["shape_dtype"].level == "pass" and declared["vs_autodiff"].level == "warn"
    assert "input x:" in declared["vs_autodiff"].message and "input y:" in declared["vs_autodiff"].message
    # declared with a scalar y, its gradient -5 dy is not summed back: the declaration is checked as given
    scalar_y = by_name(plan.check_function(ops.from_function(needs_seven, input_shapes=[((7,), ())])))
    assert "input y: gradient has shape (7,), expected ()" in scalar_y["shape_dtype"].message


# -- verdicts of the correct functions: no fail, each message says what was checked --------------------------
@pytest.mark.slow
def test_two_input_gradient_reversal_passes_and_its_difference_is_named_per_input():
    results = by_name(testing.assert_custom_gradient(grad_reverse))  # the guardrail takes two inputs
    assert "x (4, 3), lam (4, 3)" in results["shape_dtype"].message
    assert "no gradient (None) for lam" in results["shape_dtype"].message
    vs = results["vs_autodiff"]
    # the backward is -lam * dy, the true gradient dy: in every direction vᵀJu(custom) = -lam vᵀJu(true)
    # intentional because examples/gradient_reversal.py declares it (its GRADIENT_EXPLORER dict), not its docstring
    assert vs.message.startswith("intentional:") and "input x:" in vs.message and "input lam" not in vs.message
    assert "Why: gradient reversal (Ganin & Lempitsky 2015)" in vs.message
    assert "lam has no gradient (None)" in results["keras_fit"].message
    assert results["special_points"].level == "skip" and "does not apply" in results["special_points"].message


@pytest.mark.slow
def test_reduction_passes_with_the_zero_vector_checked():
    results = by_name(testing.assert_custom_gradient(safe_norm))
    assert "the zero vector" in results["finite"].message
    assert results["vs_autodiff"].level == "pass" and "equals the numerical one" in results["vs_autodiff"].message


@pytest.mark.slow
def test_a_variable_is_trained_by_the_fit_and_put_back():
    """Read where the fit ran: the checks run in this process (the guardrail runs an importable function's in a
    worker process, whose copy of the variable this process never sees)."""
    before = scale.numpy()
    results = by_name(guardrail.custom_gradient_checks(scaled))
    assert "variable(s) scale updated by the fit" in results["keras_fit"].message  # the fit moved it here
    assert scale.numpy() == before  # and the check put the team's variable back as it found it


@pytest.mark.slow
def test_a_flag_is_checked_at_both_values():
    results = by_name(testing.assert_custom_gradient(binarize))
    assert results["graph"].message.endswith("with clip=False (its default, not passed) (at clip=False and clip=True)")
    # the row of the other value, as the check made it: clip is positional-only, so it is passed positionally
    at_true = elementwise.graph_on_sweep(Subject.of(binarize), {"clip": True})
    assert at_true.level == "pass" and at_true.message.endswith("with clip=True positionally")


@pytest.mark.slow
def test_a_domain_is_inferred_from_the_float64_forward():
    x = np.linspace(-3.0, 3.0, 7)
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.log(np.sinh(x[x < 0]))).all()  # the reference: outside the domain for x < 0
    results = by_name(testing.assert_custom_gradient(log_sinh))
    assert "outside the function's domain" in results["finite"].message
    assert "outside the function's domain" in results["vs_autodiff"].message
    assert results["saved_model"].level == "pass"  # NaN compared equal to NaN after reload
    assert results["keras_fit"].level == "pass"  # the model's inputs are mapped into (0, 3]


# -- verdicts of the broken ones: the named check, the input and the cause --------------------------------------
@pytest.mark.slow
def test_a_bias_gradient_not_summed_back_fails_shape_dtype_naming_the_bias():
    results = by_name(plan.check_function(ops.from_function(bias_add_unreduced)))
    row = results["shape_dtype"]
    assert row.level == "fail" and "input bias: gradient has shape (4, 3), expected ()" in row.message
    with pytest.raises(AssertionError, match="input bias"):
        testing.assert_custom_gradient(bias_add_unreduced)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fn,check,says",
    [
        (product_one_gradient, "shape_dtype", ["x (4, 3), y (4, 3)", "expected to return 2 gradients"]),
        (matmul_no_transpose, "shape_dtype", ["a (2, 3), b (3, 4)", "Matrix size-incompatible: In[0]: [2,4]"]),
        (gained, "shape_dtype", ["keyword argument 'variables'", "Fix: the function reads a tf.Variable"]),
        (sign_ste, "graph", ["at clip=True", "clip=True by keyword", "only when eager"]),
        (norm_naive_grad, "finite", ["float32, x = the zero vector: the gradient of x is NaN"]),
    ],
)
def test_a_broken_function_fails_the_named_check(fn, check, says):
    results = by_name(plan.check_function(ops.from_function(fn)))
    assert results[check].level == "fail", results[check]
    for text in says:
        assert text in results[check].message, (text, results[check].message)
    if fn in (product_one_gradient, matmul_no_transpose, gained):  # no input it runs on: nothing else checked
        others = [r for r in results.values() if r.name != check]
        assert all(r.level == "fail" and r.message.startswith("not checked: ") for r in others), others
    else:
        assert [r.name for r in results.values() if r.level == "fail"] == [check]


@tf.custom_gradient
def product_wrong_y(x, y):
    """x * y with the gradient of y doubled."""
    return x * y, lambda dy: (dy * y, 2.0 * dy * x)


SAME_SHAPES = {"input_shapes": [((4, 3), (4, 3)), ((2, 5), (2, 5))]}  # its y gradient is not summed back


def test_directional_check_finds_a_documented_wrong_gradient_of_one_input_only():
    """Through the docstring path: the docstring is quoted as context and excuses nothing."""
    results = by_name(plan.check_function(ops.from_function(product_wrong_y, **SAME_SHAPES)))
    result = results["vs_autodiff"]
    assert result.level == "warn" and "input y:" in result.message and "input x:" not in result.message
    assert "a constant 2 times the numerical one" in result.message  # d(x*y)/dy = x; the backward gives 2x
    assert 'its docstring "x * y with the gradient of y doubled." is context' in result.message
    assert 'GRADIENT_EXPLORER = {"product_wrong_y": {"justification": "<why>"}}' in result.message


@pytest.mark.slow
def test_the_guardrail_warns_for_a_documented_wrong_gradient_with_its_shapes_declared():
    """The issue's probe: this fixture through assert_custom_gradient with its shapes declared used to pass 7 of 7."""
    shapes = SAME_SHAPES
    with pytest.warns(GradientCheckWarning, match=r"^product_wrong_y: vs_autodiff: .*input y:") as caught:
        results = by_name(testing.assert_custom_gradient(product_wrong_y, **shapes))
    assert results["vs_autodiff"].level == "warn"
    assert [str(w.message).split(": ")[1] for w in caught if w.category is GradientCheckWarning] == ["vs_autodiff"]
    declared = by_name(testing.assert_custom_gradient(product_wrong_y, justification="y's rate doubled", **shapes))
    assert declared["vs_autodiff"].level == "pass" and "Why: y's rate doubled" in declared["vs_autodiff"].message


class AtZero(inputs.Assignment):
    """x exactly 0 (on the kink of |x|), y ones."""

    def values(self, seed):
        return [np.zeros(3), np.ones(3)]


def test_directional_check_on_a_kink_is_not_a_wrong_gradient():
    @tf.custom_gradient
    def abs_plus(x, y):
        """|x| + y; at x = 0 the backward takes the right-hand slope, 1."""
        return tf.abs(x) + y, lambda dy: (dy * tf.where(x >= 0, tf.ones_like(x), -tf.ones_like(x)), dy)

    spec = ops.from_function(abs_plus)
    user = spec.user_function
    found = inputs.Found(working=[AtZero(((3,), (3,)), "declared")])
    rows = any_signature.directional_rows(user, {}, {}, lambda i: user.call_all(i), found.working[0], 1)
    x_rows = [r for r in rows if r["input"] == "x"]
    # the reference: the central difference of |t u| at t = 0 is 0, the one-sided ones are +-sum(v |u|)
    assert all(r["numerical"] == pytest.approx(0.0, abs=1e-9) and not r["smooth"] for r in x_rows)
    assert all(r["smooth"] for r in rows if r["input"] == "y")
    result = any_signature.vs_autodiff_directional(Subject(spec, {}, found))
    assert result.level == "pass" and "sit on a kink or jump" in result.message


@pytest.mark.slow  # the checks run in a worker process
# -- the command line: a module of such functions is checked, never refused -----------------------------------
def test_a_module_of_several_input_functions_gets_rows_and_exit_1_not_2(tmp_path, capsys):
    module = tmp_path / "team_ops.py"
    module.write_text(
        textwrap.dedent(
            '''
            import tensorflow as tf

            GRADIENT_EXPLORER = {"clip_gradient_by_norm": {"input_shapes": [((4, 3), ()), ((2, 5), ())]}}


            @tf.custom_gradient
            def clip_gradient_by_norm(x, norm):
                """TensorFlow's docstring example: clips the gradient's norm, not the value."""
                y = tf.identity(x)

                def grad_fn(dy):
                    return [tf.clip_by_norm(dy, norm), None]

                return y, grad_fn


            @tf.custom_gradient
            def times(x, y):
                """x * y, the gradient not summed back for a broadcast y."""
                return x * y, lambda dy: (dy * y, dy * x)
            '''
        )
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = runner.main([str(module), "--json"])
    rows = {(r["op"], r["check"]): r for r in json.loads(out.getvalue())}
    assert code == 1
    assert "x (4, 3), norm scalar" in rows[("clip_gradient_by_norm", "shape_dtype")]["message"]  # the declaration
    assert all(r["passed"] for (op, _), r in rows.items() if op == "clip_gradient_by_norm")
    assert "input y: gradient has shape (4, 3), expected ()" in rows[("times", "shape_dtype")]["message"]


def test_a_bad_declaration_is_a_failed_row_of_that_function(tmp_path, capsys):
    module = tmp_path / "declared_badly.py"
    module.write_text(
        "import tensorflow as tf\n"
        "GRADIENT_EXPLORER = {'f': {'input_shapes': 'big'}}\n"
        "@tf.custom_gradient\n"
        "def f(x, y):\n"
        "    return x * y, lambda dy: (dy * y, dy * x)\n"
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = runner.main([str(module), "--json"])
    rows = {r["check"]: r for r in json.loads(out.getvalue())}
    assert code == 1 and rows["shape_dtype"]["level"] == "fail"
    assert "input_shapes must be a list of assignments" in rows["shape_dtype"]["message"]


def test_a_factory_closure_bound_at_module_level_is_found_and_checked(tmp_path):
    module = tmp_path / "factory_ops.py"
    module.write_text(
        textwrap.dedent(
            '''
            import tensorflow as tf


            def make_ste(threshold):
                @tf.custom_gradient
                def ste(x):
                    """Step at the threshold; the straight-through estimator passes dy."""
                    return tf.cast(x > threshold, x.dtype), lambda dy: dy

                return ste


            ste = make_ste(0.5)
            '''
        )
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = runner.main([str(module), "--json"])
    rows = {r["check"]: r for r in json.loads(out.getvalue())}
    assert code == 0 and {r["level"] for r in rows.values()} == {"pass"}
    assert "x = 0.5 (jump)" in rows["special_points"]["message"]  # the bound threshold, found by the sweep
    assert rows["vs_autodiff"]["message"].startswith("a surrogate:")  # true gradient 0 but at the step


def test_keras_fit_builds_and_fits_a_model_at_two_input_assignments():
    """A product and a bias add are fitted at two assignments of different shapes each, the matmul at
    (2, 3) @ (3, 4) and (5, 2) @ (2, 3) (m, k, n all different: a missing transpose cannot fit both)."""
    spec = ops.from_function(matmul)
    result = any_signature.keras_fit_at_assignments(Subject(spec, {}, found_for(matmul)[1]))
    assert result.level == "pass"
    assert "inputs a (2, 3), b (3, 4)" in result.message and "inputs a (5, 2), b (2, 3)" in result.message
    assert result.message.count("after it (finite)") == 2
    result = any_signature.keras_fit_at_assignments(Subject(ops.from_function(bias_add), {}, found_for(bias_add)[1]))
    assert result.level == "pass" and "and at another input assignment" in result.message
