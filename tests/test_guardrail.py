"""The guardrail's keyword arguments reach the checks: ``points=`` (the README's ``points=[(0.0, "jump")]``),
``params=`` (the values the checks run at) and the refusal of either for a layer class; its warn rows are
warnings of their own category, which pytest lists and a team's ``filterwarnings`` makes failures."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import tensorflow as tf

from examples.spike import fast_sigmoid_spike
from examples.square import CustomSquareLayer
from explorer.checker import guardrail
from explorer.testing import GradientCheckWarning, assert_custom_gradient

ROOT = Path(__file__).resolve().parent.parent

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


def test_forward_mode_reaches_the_checks_and_its_warning_is_raised():
    """The opt-in check: binarize's straight-through backward passes dy, but inside tf.function the JVP of sign is 0."""
    from examples.binarize import binarize

    with pytest.warns(GradientCheckWarning, match="^binarize: forward_mode: forward mode does not follow"):
        results = _by_name(assert_custom_gradient(binarize, forward_mode=True))
    assert list(results)[-1] == "forward_mode"
    assert "tf.function: uᵀ(Jv) = 0 from ForwardAccumulator's JVP" in results["forward_mode"].message
    with pytest.raises(TypeError, match="a layer takes only op= and time_limit="):
        assert_custom_gradient(CustomSquareLayer, forward_mode=True)


# -- warnings: one per warn row, of their own category, which a team's CI can make strict ----------------------
@tf.custom_gradient
def my_sin(x):
    """Sine."""
    return tf.sin(x), lambda dy: dy * 3.0 * tf.cos(x)  # 3x the true gradient


def test_a_documented_wrong_gradient_warns_with_its_own_category():
    with pytest.warns(GradientCheckWarning) as caught:
        results = _by_name(assert_custom_gradient(my_sin))
    assert [r.name for r in results.values() if r.level == "warn"] == ["vs_autodiff"]
    (warning,) = [w for w in caught if w.category is GradientCheckWarning]
    assert str(warning.message).startswith("my_sin: vs_autodiff: the custom gradient is 3 times autodiff")
    assert warning.filename == __file__  # points at the test's own line
    assert issubclass(GradientCheckWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientCheckWarning)  # what filterwarnings = ["error::..."] does
        with pytest.raises(GradientCheckWarning, match="my_sin: vs_autodiff"):
            assert_custom_gradient(my_sin)


def test_a_documented_straight_through_sign_stays_clean_under_the_strict_filter():
    from examples.binarize import binarize

    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientCheckWarning)
        results = assert_custom_gradient(binarize)
    assert {r.level for r in results} == {"pass"}


TEAM_TEST = """
import team_ops
from explorer.testing import assert_custom_gradient


def test_my_sin():
    assert_custom_gradient(team_ops.my_sin)
"""


def test_pytest_lists_the_warning_and_the_readme_filter_makes_it_fail(tmp_path):
    """A team's own pytest run, in a new process: the warnings summary names the function and the check; with the
    README's ``filterwarnings`` line in the team's pyproject.toml the same test fails."""
    (tmp_path / "team_ops.py").write_text(
        'import tensorflow as tf\n\n\n@tf.custom_gradient\ndef my_sin(x):\n    """Sine."""\n'
        "    return tf.sin(x), lambda dy: dy * 3.0 * tf.cos(x)\n"
    )
    (tmp_path / "test_team.py").write_text(TEAM_TEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2"}  # fmt: skip
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_team.py"]
    lenient = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert lenient.returncode == 0, lenient.stdout[-3000:]
    assert "warnings summary" in lenient.stdout and "GradientCheckWarning: my_sin: vs_autodiff:" in lenient.stdout
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nfilterwarnings = ["error::explorer.testing.GradientCheckWarning"]\n'
    )
    strict = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert strict.returncode == 1, strict.stdout[-3000:]
    assert "1 failed" in strict.stdout and "GradientCheckWarning: my_sin: vs_autodiff:" in strict.stdout
