"""The guardrail's keyword arguments reach the checks: ``points=`` (the README's ``points=[(0.0, "jump")]``),
``params=`` (the values the checks run at) and the refusal of either for a layer class."""

import pytest
import tensorflow as tf

from examples.spike import fast_sigmoid_spike
from examples.square import CustomSquareLayer
from explorer.checker import guardrail
from explorer.testing import assert_custom_gradient

pytestmark = pytest.mark.slow


@tf.custom_gradient
def scale_with_nan_grad_above_3(x, slope=1.0, /):
    """Forward slope * x; backward slope, written as slope * sqrt(3 - slope) / sqrt(3 - slope): NaN once slope > 3."""

    def grad(dy):
        return dy * slope * tf.sqrt(3.0 - slope) / tf.sqrt(3.0 - slope), None

    return x * slope, grad


def _by_name(results) -> dict:
    return {result.name: result for result in results}


def test_the_readme_points_example_declares_the_spike_s_jump():
    declared = _by_name(assert_custom_gradient(fast_sigmoid_spike, points=[(0.0, "jump")]))
    assert declared["special_points"].level == "pass"
    assert "not declared" not in declared["special_points"].message
    # the same function with the jump declared in the wrong place: the check names both places
    misplaced = _by_name(guardrail.custom_gradient_checks(fast_sigmoid_spike, points=[(1.0, "jump")]))
    assert misplaced["special_points"].level == "warn"
    assert "x = 0 (jump)" in misplaced["special_points"].message and "x = 1 (jump)" in misplaced["special_points"].message


def test_params_are_the_values_the_checks_run_at():
    ranges = {"slope": (0.5, 5.0)}
    assert_custom_gradient(scale_with_nan_grad_above_3, ranges=ranges, params={"slope": 2.0})  # sqrt(1): finite
    with pytest.raises(AssertionError) as error:
        assert_custom_gradient(scale_with_nan_grad_above_3, ranges=ranges, params={"slope": 4.0})  # sqrt(-1): NaN
    assert "\n  finite: " in str(error.value) and "NaN" in str(error.value)


def test_a_layer_takes_neither_points_nor_params():
    for keyword in ({"points": [(0.0, "jump")]}, {"params": {"slope": 2.0}}):
        with pytest.raises(TypeError, match="a layer takes only op= and time_limit="):
            assert_custom_gradient(CustomSquareLayer, **keyword)
