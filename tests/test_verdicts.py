"""Every branch of the checker that turns a number into pass, warn or fail, from both sides (issue 45).

Each verdict is pinned by a case just inside and one just outside its bound, with the expected numbers written
here by hand or computed with NumPy, never taken from the checker: the kink interval (both ends, and its widening
by the custom gradient's own one-sided limits), the second derivative through the custom gradient (a wrong value
in both modes, one input and several), the ``backends`` comparison per dtype (rtol and atol apart), the graph
comparison, ``vs_autodiff``'s "differs" and its ratio words. A wrong edit of a bound (a tolerance 100 times wider,
an end of an interval dropped) fails one of these.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from explorer.checker import backends, checks, common, elementwise, higher_order, plan
from explorer.checker.common import Subject

LEFT, RIGHT = -0.5, 2.0  # the one-sided slopes at 0 of the forward below: f(x) = 2x for x > 0, -0.5x for x <= 0
KINK_TOL = 2e-4  # the contract: 1e-4 (float64) relative to the larger slope, 2 (test_the_tolerances_are_the_contract)


def _bent(x):
    return tf.where(x > 0, RIGHT * x, LEFT * x)


def _kinked(value_at_zero: float, left_limit: float = LEFT, right_limit: float = RIGHT):
    """The bent forward with a custom gradient that is ``left_limit`` / ``right_limit`` on each side of 0 and
    ``value_at_zero`` AT 0."""

    @tf.custom_gradient
    def kinked(x):
        def grad(dy):
            sides = tf.where(x > 0, tf.constant(right_limit, x.dtype), tf.constant(left_limit, x.dtype))
            return dy * tf.where(tf.equal(x, 0), tf.constant(value_at_zero, x.dtype), sides)

        return _bent(x), grad

    return kinked


def _kink(fn):
    return checks.check_kink(Subject.of(fn))


def test_the_tolerances_are_the_contract():
    """The numbers the cases below are built around, written here (a wider tolerance is a weaker checker: change
    it here, with its reason, or not at all)."""
    assert elementwise.KINK_TOLERANCE == {"float64": 1e-4, "float32": 2e-2}
    assert higher_order.SECOND_TOLERANCE == {"float64": {"rtol": 1e-3, "atol": 1e-6}, "float32": {"rtol": 2e-2, "atol": 2e-3}}
    assert (common.GRAPH_TOLERANCE, common.COMPARE_TOLERANCE) == ({"rtol": 1e-5, "atol": 1e-6}, {"rtol": 1e-4, "atol": 1e-6})
    assert common.RATIO_TOLERANCE == 1e-3 and higher_order.ZERO_SECOND == 1e-5
    assert higher_order.JVP_TOLERANCE == {"rtol": 1e-4, "atol": 1e-5}
    assert backends.TOLERANCE == {"float16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}


# -- kink: [min, max] of the one-sided slopes, endpoints included, plus the tolerance ------------------------
@pytest.mark.parametrize(
    ("value", "level"),
    [
        (LEFT - 3 * KINK_TOL, "fail"),  # below the lower slope: the lower bound
        (LEFT - 0.5 * KINK_TOL, "pass"),  # the lower slope itself, within the tolerance
        (LEFT, "pass"),
        (0.3, "pass"),  # a subgradient in between
        (RIGHT, "pass"),
        (RIGHT + 0.5 * KINK_TOL, "pass"),
        (RIGHT + 0.75 * KINK_TOL, "pass"),  # 1.5e-4: inside only because the tolerance scales with the slope 2
        (RIGHT + 3 * KINK_TOL, "fail"),  # above the upper slope: the upper bound
        (5.0, "fail"),
        (-1.0, "fail"),
    ],
)
def test_the_custom_value_at_a_kink_lies_between_the_one_sided_slopes(value, level):
    check = _kink(_kinked(value))
    assert (check.name, check.level) == ("kink", level), check.message
    assert "slopes -0.5 (left) and 2 (right)" in check.message  # measured by the checker, known by hand
    if level == "fail":
        assert "outside [-0.5, 2]" in check.message and "widened" not in check.message


@pytest.mark.parametrize(
    ("value", "level"),
    [
        (2.5, "pass"),  # outside the slopes [-0.5, 2], inside the custom limits [-1.5, 3]: only the widening passes it
        (3.0 + 0.5 * KINK_TOL, "pass"),  # the tolerance is relative to the larger slope 2 (2e-4), not to the limit 3
        (3.0 + 3 * KINK_TOL, "fail"),
        (-1.5, "pass"),
        (-1.0, "pass"),  # below the lower slope -0.5, above the lower custom limit -1.5
        (-1.5 - 3 * KINK_TOL, "fail"),
    ],
)
def test_a_surrogate_around_the_kink_widens_the_interval_by_its_own_one_sided_limits(value, level):
    """The custom gradient is -1.5 left of 0 and 3 right of it (three times the slopes): the value AT 0 may lie
    anywhere in [min, max] of the slopes and those limits, [-1.5, 3]."""
    check = _kink(_kinked(value, left_limit=-1.5, right_limit=3.0))
    assert check.level == level, check.message
    if level == "fail":
        assert "outside [-1.5, 3], widened by the custom gradient's own one-sided limits -1.5 and 3" in check.message


def test_limits_within_the_tolerance_of_the_slopes_do_not_widen():
    """Custom limits equal to the slopes up to half the tolerance: no widening, 2.5 is outside [-0.5, 2]."""
    check = _kink(_kinked(2.5, left_limit=LEFT + 0.5 * KINK_TOL, right_limit=RIGHT - 0.5 * KINK_TOL))
    assert check.level == "fail" and "widened" not in check.message, check.message


def test_a_boundary_of_the_custom_gradient_alone_is_no_kink():
    """A smooth forward (slope 1 on both sides) whose custom gradient steps at 0: nothing to judge there."""

    @tf.custom_gradient
    def identity_with_a_stepped_gradient(x):
        return x * 1.0, lambda dy: dy * tf.where(x >= 0, tf.cast(7.0, x.dtype), tf.cast(0.0, x.dtype))

    check = _kink(identity_with_a_stepped_gradient)
    assert check.level == "pass" and check.message.startswith("no kink of the forward"), check.message


def test_one_sided_slopes_and_the_continuity_test_by_hand():
    slopes = elementwise.one_sided(_kinked(0.3), 0.0, "float64")
    assert slopes["left"] == pytest.approx(LEFT, rel=1e-9) and slopes["right"] == pytest.approx(RIGHT, rel=1e-9)
    assert (slopes["value"], slopes["custom_left"], slopes["custom_right"]) == (0.3, LEFT, RIGHT)
    assert slopes["continuous"] is True

    @tf.custom_gradient
    def step(x):
        return tf.where(x > 0, tf.ones_like(x), tf.zeros_like(x)), lambda dy: dy

    assert elementwise.one_sided(step, 0.0, "float64")["continuous"] is False  # a jump: not a kink


# -- second_order: the derivative through the custom gradient against central differences -------------------
def _times(k: float):
    """An identity whose gradient is k: a backward that routes x through it has a second derivative k times
    the true one, eagerly and in tf.function alike (x is its argument, not a closure)."""

    @tf.custom_gradient
    def scaled(x):
        return tf.identity(x), lambda dy: dy * tf.constant(k, dy.dtype)

    return scaled


def _sine_with_second_derivative_times(k: float):
    """sin(x) with the backward dy * cos(x) whose own derivative comes out as -k sin(x) (the true one: -sin x)."""
    scaled = _times(k)

    @tf.custom_gradient
    def sine(x):
        return tf.sin(x), lambda dy: dy * tf.cos(scaled(x))

    return sine


SECOND_RTOL = 1e-3  # the contract for float64 (test_the_tolerances_are_the_contract)


@pytest.mark.parametrize(
    ("k", "level"),
    [(1.0, "pass"), (1 + 0.2 * SECOND_RTOL, "pass"), (1 + 5 * SECOND_RTOL, "warn"), (-1.0, "warn"), (2.0, "warn")],
)
def test_a_wrong_second_derivative_in_both_modes_warns_one_input(k, level):
    x = np.linspace(-3, 3, 61)
    with tf.GradientTape() as outer:  # the premise, by hand: eager gives -k sin(x)
        xt = tf.constant(x)
        outer.watch(xt)
        with tf.GradientTape() as inner:
            inner.watch(xt)
            y = _sine_with_second_derivative_times(k)(xt)
        first = inner.gradient(y, xt)
    np.testing.assert_allclose(outer.gradient(first, xt).numpy(), -k * np.sin(x), rtol=1e-12, atol=1e-15)
    check = checks.check_second_order(Subject.of(_sine_with_second_derivative_times(k)))
    assert (check.name, check.level) == ("second_order", level), check.message
    if level == "warn":
        # both modes are named: each gives the wrong value, and the worst point's numbers are -k sin(x) vs -sin(x)
        assert "eager gives" in check.message and "tf.function gives" in check.message
        worst = float(check.message.split("at x = ")[1].split(" ")[0])
        assert f"where central differences of the custom gradient give {-np.sin(worst):.4g}" in check.message


def _sine_plus_square_times(k: float):
    """f(x, y) = sin(x) + y^2 elementwise summed: two inputs, the x-row of the second derivative k times the true."""
    scaled = _times(k)

    @tf.custom_gradient
    def sine_plus_square(x, y):
        return tf.reduce_sum(tf.sin(x) + y * y), lambda dy: (dy * tf.cos(scaled(x)), dy * 2.0 * y)

    return sine_plus_square


def _subject_with_inputs(fn) -> Subject:
    subject = Subject.of(fn)
    assert not subject.user.is_elementwise(subject.params)
    return plan._with_inputs(subject, 60.0)


@pytest.mark.parametrize(
    ("k", "level"),
    [(1.0, "pass"), (1 + 0.2 * SECOND_RTOL, "pass"), (1 + 5 * SECOND_RTOL, "warn"), (1.3, "warn"), (-1.0, "warn")],
)
def test_a_wrong_second_derivative_in_both_modes_warns_several_inputs(k, level):
    """The input assignments are float64 (rtol 1e-3: 0.02 % off passes, 0.5 % warns); the input named is x, never y."""
    subject = _subject_with_inputs(_sine_plus_square_times(k))
    assert {a.dtype for a in subject.found.working[:2]} == {"float64"}
    check = checks.check_second_order(subject)
    assert (check.name, check.level) == ("second_order", level), check.message
    if level == "warn":
        assert check.message.startswith("input(s) x: eager gives"), check.message


# -- backends: each dtype's rtol and atol, from both sides ------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("reference", [0.0, 1.0, -1000.0])
def test_backend_values_just_inside_each_dtypes_tolerance_agree_just_outside_differ(dtype, reference):
    rtol, atol = {"float16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}[dtype]  # the contract
    assert backends.TOLERANCE[dtype] == (rtol, atol)
    if dtype == "float16" and reference == -1000.0:
        reference = -100.0  # float16 has steps of 0.5 at 1000: too coarse to sit just inside 10 + 0.01
    allowed = atol + rtol * abs(reference)  # np.isclose's bound, by hand
    ref = np.full(3, reference, dtype)
    inside = (ref.astype(np.float64) + 0.5 * allowed).astype(dtype)
    outside = (ref.astype(np.float64) + 2.0 * allowed).astype(dtype)
    assert abs(float(inside[0]) - reference) <= allowed < abs(float(outside[0]) - reference)  # representable
    assert backends._compare_arrays("gradient of x", inside, ref, ref, "tensorflow eager") is None
    kind, gets = backends._compare_arrays("gradient of x", outside, ref, ref, "tensorflow eager")
    assert kind == "values" and gets.startswith("gradient of x [") and "3 of 3 elements differ" in gets


def test_a_value_difference_fails_the_backends_row_naming_where():
    plan_ = {"inputs": ["x"], "assignments": [{"values": [np.zeros(2, np.float32)]}], "keywords": []}
    ref = {"outputs": [np.array([1.0, 2.0], np.float32)], "gradients": [np.array([0.5, 0.25], np.float32)]}
    close = {"outputs": [np.array([1.00004, 2.0], np.float32)], "gradients": [np.array([0.50003, 0.25], np.float32)]}
    far = {"outputs": [np.array([1.0, 2.0], np.float32)], "gradients": [np.array([0.5003, 0.25], np.float32)]}
    same = {"eager": [ref], "compiled": [ref]}
    assert backends.verdict("f", plan_, {"tensorflow": same, "jax": {"eager": [close], "compiled": [close]}}).level == "pass"
    row = backends.verdict("f", plan_, {"tensorflow": same, "jax": {"eager": [far], "compiled": [close]}})
    assert row.level == "fail" and row.message.startswith("the backends disagree (jax eager) (compared with tensorflow eager)")
    assert "gradient of x [0.5003] where tensorflow eager gives [0.5]" in row.message and "jax.jit" not in row.message


def test_the_explore_panels_shading_uses_the_float32_tolerance():
    x = np.array([0.0, 1.0, 2.0], np.float32)
    reference = {"forward": np.array([0.0, 1.0, 100.0]), "gradient": np.zeros(3)}
    other = {"forward": np.array([0.5e-5, 1.0 + 2.2e-4, 100.0 + 0.5e-2]), "gradient": np.zeros(3)}
    # allowed: 1e-5 + 1e-4 |ref|: 1e-5 at 0 (0.5e-5 inside), 1.1e-4 at 1 (2.2e-4 outside), 1.001e-2 at 100 (inside)
    mask = backends._differing(x, {"tensorflow": reference, "jax": other})
    assert mask.tolist() == [False, True, False]


# -- graph: eager against tf.function and XLA ----------------------------------------------------------------
def test_graph_differences_inside_and_outside_its_tolerance():
    rtol, atol = 1e-5, 1e-6  # the contract (test_the_tolerances_are_the_contract)
    x = np.array([0.0, 1.0, 2.0])
    eager = np.array([0.0, 1.0, 1000.0])
    inside = eager + 0.5 * (atol + rtol * np.abs(eager))
    outside = eager + np.array([0.0, 0.0, 2.0]) * (atol + rtol * 1000.0)
    assert elementwise._graph_differences("tf.function", {"gradient": tf.constant(inside)}, {"gradient": eager}, x) == []
    (problem,) = elementwise._graph_differences("tf.function", {"gradient": tf.constant(outside)}, {"gradient": eager}, x)
    assert problem == "tf.function gradient differs from eager at 1 points, e.g. x = 2: 1000 vs 1000"


# -- vs_autodiff: differs or not, and the ratio's words --------------------------------------------------
def _softplus_times(factor: float):
    @tf.custom_gradient
    def softplus_scaled(x):
        return tf.math.softplus(x), lambda dy: dy * factor * tf.math.sigmoid(x)

    return softplus_scaled


@pytest.mark.parametrize(
    ("factor", "level", "says"),
    [
        (1.0 + 0.2e-4, "pass", "the custom gradient equals the true gradient"),  # COMPARE_TOLERANCE's rtol: 1e-4
        (1.0 + 5e-4, "warn", "the custom gradient is 1 times autodiff"),  # 1.0005 in 4 digits
        (0.5, "warn", "the custom gradient is half of autodiff"),
    ],
)
def test_vs_autodiff_says_equal_within_its_tolerance_and_names_a_constant_factor(factor, level, says):
    check = checks.check_vs_autodiff(Subject.of(_softplus_times(factor)))
    assert check.level == level and says in check.message, check.message


@pytest.mark.parametrize(
    ("ratio", "words"),
    [
        (0.5, "half of"), (0.5 * (1 + 0.5e-3), "half of"), (0.5 * (1 + 3e-3), "0.5015 times"),
        (2.0 * (1 - 0.5e-3), "twice"), (2.0 * (1 - 3e-3), "1.994 times"),
        (-1.0, "the negative of"), (0.5e-3, "zero times"), (3e-3, "0.003 times"),
    ],
)  # fmt: skip
def test_ratio_words_within_the_ratio_tolerance(ratio, words):
    assert elementwise._ratio_words(ratio) == words


# -- second_order: None is right only where the reference is 0 (ZERO_SECOND) -------------------------------
def _detached_line(slope: float):
    """x + slope x^2 / 2 with the backward dy * (1 + slope * x) computed from a detached x: the second derivative
    through it is None, the custom gradient's own derivative is ``slope`` everywhere."""

    @tf.custom_gradient
    def detached(x):
        def grad(dy):
            return dy * (1.0 + tf.constant(slope, x.dtype) * tf.stop_gradient(x))

        return x + tf.constant(slope / 2, x.dtype) * x * x, grad

    return detached


@pytest.mark.parametrize(("slope", "level"), [(0.0, "pass"), (0.5e-5, "pass"), (3e-5, "warn"), (1.0, "warn")])
def test_none_through_the_custom_gradient_passes_only_where_its_derivative_is_zero(slope, level):
    """ZERO_SECOND is 1e-5: a derivative of 0.5e-5 counts as 0, one of 3e-5 does not."""
    check = checks.check_second_order(Subject.of(_detached_line(slope)))
    assert (check.name, check.level) == ("second_order", level), check.message
    assert check.message.startswith("None through the custom gradient (eager and tf.function)")


# -- forward_mode: uᵀ(Jv) from ForwardAccumulator against (uᵀJ)v from the backward (JVP_TOLERANCE) ----------
def _sine_with_backward_times(factor: float):
    """sin(x), its backward factor * cos(x): forward mode sees cos(x) (the forward's own JVP)."""

    @tf.custom_gradient
    def sine(x):
        return tf.sin(x), lambda dy: dy * tf.constant(factor, x.dtype) * tf.cos(x)

    return sine


@pytest.mark.parametrize(("factor", "level"), [(1.0, "pass"), (1 + 0.2e-4, "pass"), (1 + 5e-4, "warn"), (-1.0, "warn")])
def test_forward_mode_agrees_within_its_tolerance_and_warns_beyond_it(factor, level):
    """JVP_TOLERANCE is rtol 1e-4, atol 1e-5 on each point's u·(Jv) against (uᵀJ)v."""
    check = checks.check_forward_mode(Subject.of(_sine_with_backward_times(factor)))
    assert (check.name, check.level) == ("forward_mode", level), check.message
    if level == "warn":
        assert check.message.startswith("forward mode does not follow the custom gradient: eager: uᵀ(Jv) =")


def test_backend_comparison_nan_missing_shapes_and_where_it_differs():
    """NaN on both sides is agreement; NaN on one side (or against a reference of another shape, or none) is a
    difference; an integer dtype gets the float32 tolerance; the message lists the first three indices."""
    compare = backends._compare_arrays
    nan = np.float32(np.nan)
    both = np.array([nan, 1.0], np.float32)
    assert compare("output", both, both.copy(), None, "tensorflow eager") is None
    kind, gets = compare("output", np.array([nan, 1.0], np.float32), np.array([0.5, 1.0], np.float32), None, "tf")
    assert (kind, gets) == ("nan", "output NaN at 1 of 2 elements, without an error")
    assert compare("output", np.array([nan], np.float32), None, None, "tf")[0] == "nan"  # no reference: NaN is news
    assert compare("output", np.array([nan, 1.0], np.float32), np.ones(3, np.float32), None, "tf")[0] == "nan"
    assert compare("output", np.array([1.0], np.float32), None, None, "tf") is None  # nothing to compare with
    assert compare("output", np.array([1.0, 2.0], np.float32), np.ones(3, np.float32), None, "tf") is None
    integers = np.array([100000, 7], np.int32)
    assert compare("output", integers, np.array([100009, 7], np.int32), None, "tf") is None  # 9 <= 1e-5 + 1e-4 * 1e5
    assert compare("output", integers, np.array([100012, 7], np.int32), None, "tf")[0] == "values"
    kind, gets = compare("gradient of x", np.arange(5, dtype=np.float32) + 1, np.zeros(5, np.float32), None, "tf eager")
    assert gets == ("gradient of x [1, 2, 3, 4, ...] where tf eager gives [0, 0, 0, 0, ...] (5 of 5 elements differ, "
                    "first at index (0,), (1,), (2,))")  # fmt: skip


def test_the_explore_panels_shading_with_nan_errors_and_missing_curves():
    x = np.array([0.0, 1.0, 2.0], np.float32)
    reference = {"forward": np.array([np.nan, 1.0, 2.0]), "gradient": np.array([1.0, np.nan, 1.0])}
    same = {"forward": np.array([np.nan, 1.0, 2.0]), "gradient": np.array([1.0, np.nan, 1.0])}
    assert not backends._differing(x, {"tensorflow": reference, "jax": same}).any()  # NaN on both sides agrees
    assert backends._differing(x, {"tensorflow": reference, "jax": {"error": "TypeError: no"}}).all()
    assert backends._differing(x, {"tensorflow": {"error": "E: x"}, "jax": reference}).all()
    assert not backends._differing(x, {"tensorflow": {"error": "E: x"}, "jax": {"error": "E: y"}}).any()
    no_gradient = {"forward": np.array([np.nan, 1.0, 2.0]), "gradient": None}
    assert backends._differing(x, {"tensorflow": reference, "jax": no_gradient}).all()  # a missing curve: all of it
    shorter = {"forward": np.array([np.nan, 1.0, 2.0]), "gradient": np.ones(2)}
    assert backends._differing(x, {"tensorflow": reference, "jax": shorter}).all()
    assert backends._differing(x, {"tensorflow": reference, "jax": {**same, "gradient": np.array([1.0, 0.0, 1.0])}}).tolist() == [
        False, True, False]  # fmt: skip


def test_the_backends_row_names_what_was_compared_what_was_not_and_how_many_more_differ():
    plan_ = {"inputs": ["x"], "assignments": [{"values": [np.zeros(2, np.float32)]}], "keywords": []}
    ok = {"outputs": [np.ones(2, np.float32)], "gradients": [np.ones(2, np.float32)]}
    same = {"eager": [ok], "compiled": [ok]}
    skipped = {"eager": [ok], "compiled": [{"skipped": "no C compiler"}]}
    row = backends.verdict("f", plan_, {"tensorflow": same, "jax": skipped}, missing=["torch"])
    assert (row.name, row.level) == ("backends", "pass")
    assert row.message == (
        "tensorflow eager and tf.function, jax eager and jax.jit agree: forward and gradients, shapes and dtypes "
        f"(torch not installed ({backends.INSTALL['torch']}); skipped jax jax.jit: no C compiler)"
    )
    assert backends.verdict("f", plan_, {"tensorflow": same, "jax": same}).message.endswith("shapes and dtypes")
    # seven differences (two outputs and five gradients off in one mode each): six shown, "and 1 more"
    plan7 = {"inputs": list("abcde"), "assignments": [{"values": [np.zeros(2, np.float32)] * 5}], "keywords": []}
    good = {"outputs": [np.ones(2, np.float32)] * 2, "gradients": [np.ones(2, np.float32)] * 5}
    bad = {"outputs": [np.full(2, 3.0, np.float32)] * 2, "gradients": [np.full(2, 3.0, np.float32)] * 5}
    row = backends.verdict("g", plan7, {"tensorflow": {"eager": [good], "compiled": [good]},
                                        "jax": {"eager": [bad], "compiled": [good]}})  # fmt: skip
    assert (row.name, row.level) == ("backends", "fail")
    assert row.message.startswith(
        "the backends disagree (jax eager) (compared with tensorflow eager). jax eager: output 1 [3, 3] where"
    )
    assert row.message.count("jax eager: ") == 6 and " (and 1 more). Likely cause: " in row.message
    assert "Compared: tensorflow, jax; what each does: tensorflow: " in row.message


def test_a_jump_is_counted_and_not_judged():
    """H(x) with the custom value 100 at 0: a jump, not a kink; the row says how many jumps it left alone."""

    @tf.custom_gradient
    def step_with_a_tall_value(x):
        value = tf.where(tf.equal(x, 0), tf.constant(100.0, x.dtype), tf.zeros_like(x))
        return tf.where(x > 0, tf.ones_like(x), tf.zeros_like(x)), lambda dy: dy * value

    check = _kink(step_with_a_tall_value)
    assert (check.name, check.level) == ("kink", "pass"), check.message
    assert check.message == (
        "no kink of the forward among the special points of [-3, 3]; 1 jump(s) of the forward not judged (there the "
        "value is a design choice, see special_points)"
    )
