"""The gradient checker and ``python -m explorer verify``.

Broken ops are built by hand (a gradient of the wrong shape or dtype, None, NaN, a forward that is
not graph-safe) and every check must report them as a failed Check with a clear message, never raise.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

import ops
from explorer import expr
from explorer.checker import checks, elementwise, plan, runner
from explorer.checker.common import Check, Subject, where

CHECK_NAMES = list(plan.FUNCTION_CHECKS)


def hand_op(key, *, forward=None, surrogate=None, backward=None, params=(), points=None, builtin=False):
    """An OpSpec built by hand (a user's unless ``builtin``), spike-like by default: forward [x > 0]."""
    return ops.OpSpec(
        key=key,
        title=key,
        family="override",
        params=params,
        forward_fn=forward or (lambda x, p: tf.cast(x > 0, x.dtype)),
        surrogate=surrogate,
        backward=backward,
        forward_tex="",
        grad_tex="",
        why="",
        reference="",
        declared_points=points or (lambda p, dtype: [ops.Point(0.0, "jump", "H(0) = 0")]),
        builtin=builtin,
    )


def by_name(results):
    return {result.name: result for result in results}


# -- the Check record ----------------------------------------------------------------------------------
def test_a_warning_passes_and_only_a_failure_fails():
    assert Check("finite", True, "worth a look", "warn").passed
    assert not Check("finite", False, "bad", "fail").passed


def test_a_skip_is_not_a_failure_and_not_a_pass():
    skipped = Check("special_points", True, "does not apply", "skip")
    assert skipped.passed and skipped.level != "pass"
    with pytest.raises(ValueError, match="contradicts"):
        Check("special_points", False, "does not apply", "skip")


@pytest.mark.parametrize("passed,level", [(True, "fail"), (False, "pass"), (True, "maybe")])
def test_check_rejects_a_level_that_contradicts_passed(passed, level):
    with pytest.raises(ValueError, match="level"):
        Check("finite", passed, "message", level)


# -- every built-in op passes -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ops.names())
def test_builtin_op_passes_every_check(key):
    results = runner.check(key)
    assert [r.name for r in results] == CHECK_NAMES
    failed = [f"{r.name}: {r.message}" for r in results if not r.passed]
    assert not failed, failed


def test_builtin_op_given_as_spec_and_with_parameters():
    results = by_name(runner.check(ops.get("ste_sign"), clip_value=0.5))
    assert all(r.passed for r in results.values())
    # ste_sign's custom gradient (1 inside |x| <= 0.5) differs from autodiff of sign (0): intentional
    assert results["vs_autodiff"].message.startswith("intentional")
    assert ops.get("ste_sign").why[:40] in results["vs_autodiff"].message


def test_bad_arguments_raise():
    with pytest.raises(KeyError, match="no_such_op"):
        runner.check("no_such_op")
    with pytest.raises(ValueError, match="alpha"):
        runner.check("atan", alpha=-5.0)


# -- broken ops are reported, never raised -------------------------------------------------------------------
def test_log_gradient_is_nan_for_negative_x_and_says_where():
    op = expr.compile_op("log_grad", "where(x > 0, 1, 0)", "log(x)", points=[0.0])
    results = by_name(runner.check(op))
    finite = results["finite"]
    assert finite.level == "fail" and not finite.passed
    # log(x) is NaN for x < 0 (1000 grid points from -3 up to -0.003, and the negative hard places) and -inf at 0
    assert "float32: the gradient is NaN at x in [-3, -0.003] (1000 points), x = -1e-30, -100, -1e+04" in finite.message
    assert "float32: the gradient is infinite at x = 0 where the forward is finite" in finite.message
    assert "float16: the gradient is NaN at x = -5.96e-08, -12, -1e+04" in finite.message
    assert "float16: the gradient is infinite at x = 0 where the forward is finite" in finite.message


@pytest.mark.parametrize(
    "nan_where,named",
    [
        # 1e4 is a hard place of every dtype; 12 only of float16 (where its exp overflows)
        (lambda x: tf.abs(x) >= 1e4, ["float16: the gradient is NaN at x = 1e+04, -1e+04", "float32: the gradient is NaN at x = 1e+04, -1e+04"]),
        (lambda x: (tf.abs(x) > 10) & (tf.abs(x) < 50), ["float16: the gradient is NaN at x = 12, -12"]),
    ],
)
def test_builtin_op_gets_the_hard_places_of_every_dtype(nan_where, named):
    """A surrogate that is NaN only far outside the sweep: the sweep grid alone (float32, [-3, 3]) sees nothing."""
    op = hand_op(
        "nan_far_out",
        forward=lambda x, p: x,
        surrogate=lambda x, p: tf.where(nan_where(x), tf.constant(np.nan, x.dtype), tf.ones_like(x)),
        points=lambda p, dtype: [],
        builtin=True,
    )
    assert np.isfinite(op.surrogate_grad(elementwise.sweep_grid(op, {})).numpy()).all()
    finite = by_name(runner.check(op))["finite"]
    assert finite.level == "fail"
    for text in named:
        assert text in finite.message
    if len(named) == 1:
        assert "float32" not in finite.message and "float64" not in finite.message


def test_log1pexp_overflow_is_documented_by_its_declared_singular_point():
    """Its naive forward overflows to inf in float32 from x = 88.72 on (float64 from 709.78), where the
    catalogue declares a singular point: a note, not a failure (half types compute in float32)."""
    spec = ops.get("log1pexp")
    assert [round(p.x, 2) for p in spec.points(-np.inf, np.inf, "float16")] == [88.72]
    finite = checks.check_finite(Subject.of(spec))
    assert finite.level == "pass"
    assert "float16 forward overflows at x = 1e+04, documented by a declared singular point" in finite.message
    assert "float32 forward overflows at x = 100, 1e+04, documented by a declared singular point" in finite.message
    assert "float64 forward overflows at x = 1000, 1e+04, documented by a declared singular point" in finite.message


@tf.custom_gradient
def naive_softplus(x):
    """The logistic gradient: autodiff of log(1 + exp(x)) is NaN once exp(x) overflows."""

    def grad(dy):
        return dy * tf.math.sigmoid(x)

    return tf.math.log(1.0 + tf.exp(x)), grad


def test_users_naive_forward_that_overflows_fails_unless_a_singular_point_documents_it():
    finite = checks.check_finite(Subject.of(ops.from_function(naive_softplus)))
    assert finite.level == "fail"
    # (at 1e4 the float64 forward overflows too: that one is only noted)
    assert "float32: the forward overflows to inf at x = 100 although its true value (float64: 100) fits" in finite.message
    assert "float16: the forward overflows to inf at x = 12 although its true value (float64: 12) fits" in finite.message
    # a user's points hold for every dtype: one at float16's onset (log 65504 = 11.09) documents all three
    declared = ops.from_function(naive_softplus, points=[(11.0, "singular")])
    finite = checks.check_finite(Subject.of(declared))
    assert finite.level == "pass"
    assert "float16 forward overflows at x = 12, 1e+04, documented by a declared singular point" in finite.message
    # a point on the other side of 0 documents nothing
    assert checks.check_finite(Subject.of(ops.from_function(naive_softplus, points=[(-11.0, "singular")]))).level == "fail"


def test_gradient_of_the_wrong_shape_is_caught():
    op = hand_op("reduced", backward=lambda x, dy, p: tf.reduce_sum(dy * x))
    results = by_name(runner.check(op))
    assert results["shape_dtype"].level == "fail"
    assert "gradient has shape ()" in results["shape_dtype"].message
    assert "x's shape and dtype" in results["shape_dtype"].message
    assert results["finite"].level == "fail"
    assert "the gradient has shape () and the output (7,) for x of shape (7,)" in results["finite"].message


def test_gradient_of_the_wrong_dtype_is_caught():
    """A surrogate in float64 breaks dy * g(x) for float32 inputs; a backward in float64 returns float64."""
    surrogate_op = hand_op("float64_surrogate", surrogate=lambda x, p: tf.cast(tf.ones_like(x), tf.float64))
    results = by_name(runner.check(surrogate_op))
    message = results["shape_dtype"].message
    assert results["shape_dtype"].level == "fail"
    assert "float16 scalar: computing output and gradient raised InvalidArgumentError" in message
    assert "double tensor" in message

    backward_op = hand_op("float64_backward", backward=lambda x, dy, p: tf.cast(dy, tf.float64))
    message = by_name(runner.check(backward_op))["shape_dtype"].message
    assert "float32 scalar: gradient dtype is float64" in message


def test_none_gradient_is_caught():
    op = hand_op("no_grad", backward=lambda x, dy, p: None)
    results = by_name(runner.check(op))
    assert results["finite"].level == "fail"
    assert "the custom gradient is None (float16)" in results["finite"].message
    assert results["shape_dtype"].level == "fail"


def test_forward_that_is_not_graph_safe_fails_the_graph_check():
    """Reading a tensor's value with .numpy() works eagerly and fails inside tf.function."""
    op = hand_op(
        "numpy_forward",
        forward=lambda x, p: x * float(p["k"].numpy()),
        surrogate=lambda x, p: tf.ones_like(x) * p["k"],
        params=(ops.Param("k", 1.0, 0.5, 2.0),),
        points=lambda p, dtype: [],
    )
    results = by_name(runner.check(op))
    graph = results["graph"]
    assert graph.level == "fail"
    assert "tf.function with k=1.5 by keyword raised AttributeError" in graph.message
    assert "has no attribute 'numpy'" in graph.message and "Fix: NumPy" in graph.message
    assert results["finite"].passed  # eager is fine


def test_undeclared_jump_fails_the_special_points_check():
    op = expr.compile_op("undeclared", "where(x > 0.5, 1, 0)", "1", points=[])
    check = by_name(runner.check(op))["special_points"]
    assert check.level == "fail"
    assert "1 undeclared special point(s): detected but not declared: x = 0.5 (jump)" in check.message


def test_declared_point_that_is_not_there_is_a_warning():
    op = expr.compile_op("extra_point", "where(x > 0, 1, 0)", "1 / (abs(x) + 1) ** 2", points=[0.0, 1.25])
    check = by_name(runner.check(op))["special_points"]
    assert check.level == "warn" and check.passed
    # the jump at 0 is there: the message ends saying why the kink check does not judge it (issue 39)
    assert check.message == "declared but not detected: x = 1.25 (jump)" + elementwise.JUMP_NOTE


def test_user_surrogate_that_differs_from_autodiff_is_a_warning():
    op = expr.compile_op(
        "my_spike", "where(x > 0, 1, 0)", "1 / (k * abs(x) + 1) ** 2", params={"k": (25.0, 1.0, 100.0)}, points=[0.0]
    )
    results = by_name(runner.check(op))
    check = results["vs_autodiff"]
    assert check.level == "warn" and check.passed
    # at x = 0 the surrogate is 1 / (0 + 1)^2 = 1 and autodiff of the step gives nothing (0)
    assert "differs from the true gradient (autodiff of the declared forward) by up to 1 at x = 0" in check.message
    assert "Intentional?" in check.message
    assert all(r.level != "fail" for r in results.values())


def test_user_op_whose_gradient_is_the_true_one_passes():
    op = expr.compile_op("square", "x ** 2", "2 * x")
    check = by_name(runner.check(op))["vs_autodiff"]
    assert check.level == "pass"
    assert "equals the true gradient (autodiff of the declared forward) on all 2001 finite points" in check.message


def test_zero_gradient_trains_nothing_and_warns():
    op = expr.compile_op("dead", "x", "0")
    check = by_name(runner.check(op))["keras_fit"]
    assert check.level == "warn"
    assert "did not move" in check.message


def test_where_summarises_runs():
    x = np.linspace(-1.0, 1.0, 5)
    assert where(x, np.array([True, True, False, False, True])) == "x in [-1, -0.5] (2 points), x = 1"
    assert where(x, np.zeros(5, bool)) == "nowhere"


# -- the command line ----------------------------------------------------------------------------------------
def test_cli_table_for_one_op(capsys):
    assert runner.main(["--op", "atan"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].split() == ["op", "check", "result", "message"]
    count = len(CHECK_NAMES)
    assert [line.split()[1] for line in lines[1 : count + 1]] == CHECK_NAMES
    assert all(line.split()[2] == "pass" for line in lines[1 : count + 1])
    assert count == 9  # kink and second_order (issue 39) pass for atan: a jump only; a differentiable surrogate
    assert lines[-1].startswith("1 op(s), 9 checks: 9 pass, 0 warn, 0 fail")


def test_cli_json(capsys):
    assert runner.main(["--op", "relu_at_zero", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["check"] for row in rows] == CHECK_NAMES
    assert {row["op"] for row in rows} == {"relu_at_zero"}
    assert all(row["level"] == "pass" and row["passed"] is True for row in rows)


def test_cli_exits_1_when_a_check_fails(monkeypatch, capsys):
    def failing(op, /, **params):
        return [Check("finite", False, "the custom gradient is NaN at x = 0", "fail")]

    monkeypatch.setattr(runner, "check", failing)
    assert runner.main(["--op", "atan"]) == 1
    assert "fail" in capsys.readouterr().out


def test_a_skip_is_counted_apart_in_the_summary_and_the_record(monkeypatch, capsys, tmp_path):
    def three_levels(op, /, **params):
        return [
            Check("finite", True, "finite everywhere"),
            Check("special_points", True, "does not apply", "skip"),
            Check("vs_autodiff", True, "no justification declared", "warn"),
        ]

    monkeypatch.setattr(runner, "check", three_levels)
    assert runner.main(["--op", "atan", "--record", "--record-dir", str(tmp_path)]) == 0  # a skip fails nothing
    out = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[2] for line in out[1:4]] == ["pass", "skip", "warn"]
    assert out[-1].startswith("1 op(s), 3 checks: 1 pass, 1 warn, 0 fail, 1 skip in ")
    (record_path,) = tmp_path.glob("*.json")
    record = json.loads(record_path.read_text())
    assert record["counts"] == {"pass": 1, "skip": 1, "warn": 1, "fail": 0}
    assert record["summary"].startswith("1 op(s), 3 checks: 1 pass, 1 warn, 0 fail, 1 skip")


def test_cli_rejects_an_unknown_op(capsys):
    assert runner.main(["--op", "nope"]) == 2
    assert "valid ops" in capsys.readouterr().err


def test_cli_record(tmp_path, capsys):
    assert runner.main(["--op", "scale_gradient", "--record", "--record-dir", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert len(written) == 2 and written[0].endswith(".json") and written[1].endswith(".md")
    record = json.loads((tmp_path / written[0]).read_text())
    assert record["environment"]["tensorflow"] == tf.__version__
    for package in ("python", "keras", "streamlit", "platform"):
        assert record["environment"][package]
    assert [c["check"] for c in record["checks"]] == CHECK_NAMES
    assert record["all_passed"] is True
