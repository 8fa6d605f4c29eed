"""Issue 39: the value at a kink, the second derivative through a custom gradient, forward mode.

The references are independent of the checker: hand-derived formulas evaluated with NumPy (the fast-sigmoid
surrogate's derivative -2 sign(x) / (|x| + 1)^3, -sin(x)), float64 central differences written here, and the
one-sided slopes of |x| and ReLU at 0 by hand.
"""

import numpy as np
import pytest
import tensorflow as tf

from examples.gradient_reversal import grad_reverse
from examples.pitfall_closure_second_order import sine_closure
from examples.pitfall_detached_surrogate import spike_detached
from examples.pitfall_kink_value import abs_five_at_zero
from examples.sine_second_order import sine_second_order
from examples.softplus import stable_softplus
from explorer.checker import checks, elementwise, higher_order, plan
from explorer.checker.common import Subject

SPIKE_X = np.array([-1.5, -0.5, 0.0, 0.5, 1.5])


@tf.custom_gradient
def spike_differentiable(x):
    """The same surrogate as spike_detached, without the stop_gradient."""
    return tf.cast(x > 0, x.dtype), lambda dy: dy / tf.square(tf.abs(x) + 1.0)


@tf.custom_gradient
def abs_zero_at_zero(x):
    return tf.abs(x), lambda dy: dy * tf.sign(x)


@tf.custom_gradient
def relu_one_at_zero(x):
    return tf.nn.relu(x), lambda dy: dy * tf.cast(x >= 0, x.dtype)


@tf.custom_gradient
def relu_zero_at_zero(x):
    return tf.nn.relu(x), lambda dy: dy * tf.cast(x > 0, x.dtype)


@tf.custom_gradient
def sign_ste(x):
    return tf.sign(x), lambda dy: dy


@tf.custom_gradient
def reversal(x):
    return tf.identity(x), lambda dy: -dy


@tf.custom_gradient
def product(x, y):
    return x * y, lambda dy: (dy * y, dy * x)


@tf.custom_gradient
def product_detached(x, y):
    return x * y, lambda dy: (dy * y, dy * tf.stop_gradient(x))


def subject_of(fn):
    """An elementwise function's subject, or any other's with its input assignments (as the plan makes them)."""
    subject = Subject.of(fn)
    if not subject.user.is_elementwise(subject.params):
        subject = plan._with_inputs(subject, 60.0)
    return subject


def spike_second_derivative(x):
    """d/dx of the fast-sigmoid surrogate 1 / (|x| + 1)^2, by hand: -2 sign(x) / (|x| + 1)^3."""
    return -2.0 * np.sign(x) / (np.abs(x) + 1.0) ** 3


# -- second order -----------------------------------------------------------------------------------------
def test_hand_values_of_the_spike_surrogates_derivative():
    expected = spike_second_derivative(SPIKE_X)
    np.testing.assert_allclose(expected, [0.128, 0.592593, 0.0, -0.592593, -0.128], atol=1e-6)
    surrogate = lambda x: 1.0 / (np.abs(x) + 1.0) ** 2  # noqa: E731
    h = 1e-6
    away = SPIKE_X != 0  # the surrogate has a cusp at 0
    central = (surrogate(SPIKE_X + h) - surrogate(SPIKE_X - h)) / (2 * h)
    np.testing.assert_allclose(central[away], expected[away], rtol=1e-6)


def test_differentiable_surrogate_gives_the_second_derivative_and_the_detached_one_none():
    x = tf.constant(SPIKE_X)
    first, second = higher_order.second_through(spike_differentiable, x)
    np.testing.assert_allclose(first.numpy(), 1.0 / (np.abs(SPIKE_X) + 1.0) ** 2)
    np.testing.assert_allclose(second.numpy(), spike_second_derivative(SPIKE_X), atol=1e-12)
    first, second = higher_order.second_through(spike_detached, x)
    np.testing.assert_allclose(first.numpy(), 1.0 / (np.abs(SPIKE_X) + 1.0) ** 2)
    assert second is None


def test_central_differences_of_the_custom_gradient_skip_its_cusp():
    central, smooth = higher_order.central_second(spike_detached, SPIKE_X, "float64")
    assert list(smooth) == [True, True, False, True, True]
    np.testing.assert_allclose(central[smooth], spike_second_derivative(SPIKE_X)[smooth], rtol=1e-6)


def test_detached_surrogate_warns_naming_the_cause_and_where():
    row = checks.check_second_order(subject_of(spike_detached))
    assert row.level == "warn", row.message
    assert row.message.startswith("None through the custom gradient (eager and tf.function) where its derivative is not 0")
    assert "tf.stop_gradient" in row.message and "Fix:" in row.message
    assert "0.4883 at x = -0.6" in row.message  # 2 / 1.6^3 = 0.48828
    assert 2 / 1.6**3 == pytest.approx(0.48828, abs=1e-5)


def test_differentiable_surrogate_passes_second_order():
    row = checks.check_second_order(subject_of(spike_differentiable))
    assert row.level == "pass", row.message
    assert "equals central differences of the custom gradient at 60 of 61 points" in row.message
    assert "1 point(s) at a kink or jump of the custom gradient not compared" in row.message  # the cusp at 0
    assert f"max |g'| = {2 / 1.1**3:.4g}" in row.message  # the largest |g'| on the grid, at x = +-0.1


def test_constant_surrogate_none_is_right_where_the_reference_is_zero():
    row = checks.check_second_order(subject_of(sign_ste))
    assert row.level == "pass" and "None through the custom gradient" in row.message
    assert "and right: the custom gradient's own derivative is 0 at all 61 of 61 points" in row.message


def test_closure_is_right_eagerly_and_none_in_tf_function():
    x = tf.constant(SPIKE_X)
    _, eager = higher_order.second_through(sine_closure, x)
    np.testing.assert_allclose(eager.numpy(), -np.sin(SPIKE_X), atol=1e-12)
    _, graph = tf.function(lambda x: higher_order.second_through(sine_closure, x), autograph=False)(x)
    assert graph is None
    row = checks.check_second_order(subject_of(sine_closure))
    assert (row.name, row.level) == ("second_order", "warn"), row.message
    assert row.message.startswith("eager gives the second derivative (") and "(0.1411 at x = -3, " in row.message  # -sin(-3)
    assert "but tf.function gives None at the same x" in row.message
    assert "closes over an input" in row.message and "pass the input to it as an argument" in row.message


def test_passing_x_as_an_argument_gives_the_second_derivative_in_tf_function():
    x = tf.constant(SPIKE_X)
    _, graph = tf.function(lambda x: higher_order.second_through(sine_second_order, x), autograph=False)(x)
    np.testing.assert_allclose(graph.numpy(), -np.sin(SPIKE_X), atol=1e-12)
    row = checks.check_second_order(subject_of(sine_second_order))
    assert row.level == "pass", row.message


def test_two_inputs_detached_backward_warns_naming_the_input():
    ok = checks.check_second_order(subject_of(product))
    assert ok.level == "pass", ok.message
    assert "random directions (per input: x, y" in ok.message
    row = checks.check_second_order(subject_of(product_detached))
    assert row.level == "warn", row.message
    assert row.message.startswith("input(s) x: the second derivative through the custom gradient is None")
    assert "tf.stop_gradient" in row.message


def test_mixed_second_derivative_of_the_product_is_the_hand_value():
    """∂/∂x ⟨u, Jᵀw⟩ for x*y: the y-gradient is w x, so the x-row is u_y w (and the y-row u_x w)."""
    rng = np.random.default_rng(0)
    x, y, w, u_x, u_y = (tf.constant(rng.normal(size=3)) for _ in range(5))
    rows = higher_order.hessian_rows(lambda inputs: product(*inputs), [x, y], [w], [u_x, u_y])
    np.testing.assert_allclose(rows[0].numpy(), (u_y * w).numpy())
    np.testing.assert_allclose(rows[1].numpy(), (u_x * w).numpy())
    detached = higher_order.hessian_rows(lambda inputs: product_detached(*inputs), [x, y], [w], [u_x, u_y])
    assert detached[0] is None


# -- kink ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fn", "slopes", "value"),
    [(abs_five_at_zero, (-1.0, 1.0), 5.0), (abs_zero_at_zero, (-1.0, 1.0), 0.0), (relu_one_at_zero, (0.0, 1.0), 1.0),
     (relu_zero_at_zero, (0.0, 1.0), 0.0)],
)
def test_one_sided_slopes_at_zero_are_the_hand_values(fn, slopes, value):
    sides = elementwise.one_sided(fn, 0.0, "float64")
    assert sides["continuous"]
    assert (sides["left"], sides["right"]) == pytest.approx(slopes, abs=1e-9)
    assert sides["value"] == value


def test_a_jump_is_not_continuous():
    assert not elementwise.one_sided(sign_ste, 0.0, "float64")["continuous"]
    assert not elementwise.one_sided(spike_detached, 0.0, "float64")["continuous"]


def test_abs_with_gradient_five_at_zero_fails_naming_point_slopes_and_value():
    row = checks.check_kink(subject_of(abs_five_at_zero))
    assert row.level == "fail"
    assert "x = 0: slopes -1 (left) and 1 (right), custom value 5, outside [-1, 1]" in row.message


@pytest.mark.parametrize("fn", [abs_zero_at_zero, relu_one_at_zero, relu_zero_at_zero])
def test_a_subgradient_at_the_kink_passes(fn):
    row = checks.check_kink(subject_of(fn))
    assert row.level == "pass", row.message
    assert "x = 0: slopes" in row.message


@pytest.mark.parametrize("fn", [sign_ste, spike_detached])
def test_a_jump_is_never_judged(fn):
    row = checks.check_kink(subject_of(fn))
    assert row.level == "pass", row.message
    assert "1 jump(s) of the forward not judged" in row.message


def test_kink_does_not_apply_to_two_inputs():
    row = checks.check_kink(subject_of(product))
    assert row.level == "skip" and row.message.startswith("does not apply: product is not one input, elementwise")


# -- forward mode -------------------------------------------------------------------------------------------
def test_reversal_jvp_is_plus_one_and_vjp_minus_one():
    x, v, u = tf.constant([0.5, -2.0]), tf.constant([1.0, 3.0]), tf.constant([2.0, 1.0])
    jvps, vjps = higher_order.jvp_and_vjp(lambda inputs: reversal(inputs[0]), [x], [v], [u])
    np.testing.assert_allclose(jvps[0].numpy(), v.numpy())  # d identity = +1
    np.testing.assert_allclose(vjps[0].numpy(), -u.numpy())  # the custom gradient: -1
    row = checks.check_forward_mode(subject_of(reversal))
    assert row.level == "warn" and "ForwardAccumulator does not use the custom gradient" in row.message
    assert "eager:" in row.message and "tf.function:" in row.message


def test_sign_ste_jvp_is_zero_in_tf_function():
    x, v, u = tf.constant([0.5, -2.0]), tf.constant([1.0, 3.0]), tf.constant([2.0, 1.0])
    call = lambda inputs: sign_ste(inputs[0])  # noqa: E731
    jvps, _ = tf.function(lambda x: higher_order.jvp_and_vjp(call, [x], [v], [u]), autograph=False)(x)
    np.testing.assert_allclose(jvps[0].numpy(), [0.0, 0.0])
    row = checks.check_forward_mode(subject_of(sign_ste))
    assert row.level == "warn" and "tf.function: uᵀ(Jv) = 0 from ForwardAccumulator's JVP" in row.message
    assert "eager:" not in row.message  # eagerly TensorFlow differentiates the custom gradient here


def test_two_input_reversal_warns_and_a_true_gradient_passes():
    row = checks.check_forward_mode(subject_of(grad_reverse))
    assert row.level == "warn" and "x (4, 3), lam (4, 3)" in row.message
    ok = checks.check_forward_mode(subject_of(stable_softplus))
    assert ok.level == "pass", ok.message


def test_forward_mode_is_opt_in():
    assert "forward_mode" not in plan.FUNCTION_CHECKS and "forward_mode" in plan.OPT_IN_CHECKS
    assert list(plan.function_checks(forward_mode=True)) == [*plan.FUNCTION_CHECKS, "forward_mode"]
    default = [row.name for row in plan.check_function(reversal)]
    assert default == list(plan.FUNCTION_CHECKS)
    asked = plan.check_function(reversal, forward_mode=True)
    assert [row.name for row in asked] == [*plan.FUNCTION_CHECKS, "forward_mode"]
    assert asked[-1].level == "warn"


def test_special_points_says_why_a_jump_is_not_judged():
    row = checks.check_special_points(subject_of(sign_ste))
    assert "0 (jump)" in row.message and row.message.endswith(elementwise.JUMP_NOTE)
    assert elementwise.JUMP_NOTE not in checks.check_special_points(subject_of(abs_zero_at_zero)).message
