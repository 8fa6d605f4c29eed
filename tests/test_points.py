"""explorer.explore.points: declared vs detected special points, one-sided limits, undeclared points."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ops
from explorer.explore.points import COLUMNS, special_points
from explorer.explore.sweeps import sweep
from tests.reference import param_sets


def _user_op(key, forward_fn, surrogate, declared_points=None):
    extra = {"declared_points": declared_points} if declared_points else {}
    return ops.OpSpec(
        key=key,
        title=key,
        family="override",
        params=(),
        forward_fn=forward_fn,
        surrogate=surrogate,
        forward_tex="",
        grad_tex="",
        why="",
        reference="",
        builtin=False,
        **extra,
    )


def _assert_all_declared_and_detected(key, table, declared):
    problems = table[table["status"] != "ok"][["x", "kind", "status", "found"]]
    assert problems.empty, f"{key}: declared and detected points disagree:\n{problems.to_string()}"
    assert sorted(table["x"]) == sorted(float(np.float32(p.x)) for p in declared)
    assert table["declared"].all() and table["detected"].all()


@pytest.mark.parametrize("key", ops.names())
def test_every_declared_point_is_detected_and_nothing_else(key):
    """The required check: defaults, [-3, 3], n = 2001, float32."""
    declared = ops.get(key).points(-3.0, 3.0, "float32")
    table = special_points(sweep(key, lo=-3.0, hi=3.0, n=2001))
    _assert_all_declared_and_detected(key, table, declared)
    assert list(table.columns) == list(COLUMNS)


@pytest.mark.parametrize("key", ops.names())
def test_declared_and_detected_agree_with_other_parameters_and_n_501(key):
    for name, params in param_sets(key).items():
        for n in (501, 2001) if name != "default" else (501,):
            declared = ops.get(key).points(-3.0, 3.0, "float32", **params)
            table = special_points(sweep(key, n=n, params=params))
            _assert_all_declared_and_detected(f"{key} {name} n={n}", table, declared)


@pytest.mark.parametrize(
    ("key", "params"),
    [
        ("sigmoid", {"slope": 100.0}),
        ("gaussian", {"alpha": 10.0}),
        ("swish_sign", {"beta": 20.0}),
        ("fast_sigmoid", {"slope": 100.0}),
        ("spike_rate_escape", {"beta": 10.0, "slope": 100.0}),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_steep_smooth_surrogates_give_no_false_points(key, params, dtype):
    table = special_points(sweep(key, n=2001, params=params, dtype=dtype))
    assert (table["status"] == "ok").all(), table[["x", "kind", "status", "found"]].to_string()


def test_half_precision_points_are_detected():
    for key in ("triangle", "ste_tern", "spike_rate_escape", "relu_at_zero"):
        table = special_points(sweep(key, dtype="float16"))
        assert (table["status"] == "ok").all(), f"{key}:\n{table.to_string()}"


# -- one-sided limits -----------------------------------------------------------------------------------
def _at(table, x):
    rows = table[table["x"] == x]
    assert len(rows) == 1, f"no single point at {x}:\n{table.to_string()}"
    return rows.iloc[0]


def test_ste_sign_limits_at_zero_and_at_the_closed_boundary():
    table = special_points(sweep("ste_sign"))
    zero = _at(table, 0.0)
    assert (zero["forward_left"], zero["forward_at"], zero["forward_right"]) == (-1.0, 1.0, 1.0)  # sign(0) = +1
    assert zero["true_grad"] == 0.0 and not zero["true_grad_missing"]
    boundary = _at(table, 1.0)
    assert (boundary["custom_left"], boundary["custom_grad"], boundary["custom_right"]) == (1.0, 1.0, 0.0)  # closed


def test_atan_limits_at_the_threshold():
    table = special_points(sweep("atan", params={"alpha": 2.0, "threshold": 0.5}))
    point = _at(table, 0.5)
    assert point["kind"] == "jump" and point["status"] == "ok"
    assert (point["forward_left"], point["forward_at"], point["forward_right"]) == (0.0, 0.0, 1.0)  # H(0) = 0
    assert point["custom_grad"] == pytest.approx(1.0)  # alpha / 2 at the threshold
    assert point["true_grad_missing"] and point["true_grad"] == 0.0


def test_rect_open_boundary_and_relu_at_zero():
    rect = _at(special_points(sweep("rect", params={"alpha": 1.0})), 0.5)
    assert (rect["custom_left"], rect["custom_grad"], rect["custom_right"]) == (1.0, 0.0, 0.0)  # open box
    relu = _at(special_points(sweep("relu_at_zero", params={"at_zero": 0.25})), 0.0)
    assert (relu["custom_left"], relu["custom_grad"], relu["custom_right"]) == (0.0, 0.25, 1.0)
    assert relu["true_grad"] == 1.0  # tf.maximum(x, 0) sends the tie to x


def test_singular_points():
    norm = _at(special_points(sweep("safe_norm")), 0.0)
    assert norm["kind"] == "singular" and norm["status"] == "ok"
    assert np.isnan(norm["true_grad"]) and norm["custom_grad"] == 0.0
    onset = float(np.float32(np.log(np.finfo(np.float32).max)))
    table = special_points(sweep("log1pexp", lo=-10.0, hi=100.0, n=2201))
    assert table["x"].tolist() == [onset] and table["status"].tolist() == ["ok"]
    assert np.isnan(table["true_grad"].iloc[0]) and table["custom_grad"].iloc[0] == 1.0


# -- user ops ------------------------------------------------------------------------------------------------
def test_an_undeclared_jump_is_reported_where_it_is():
    spec = _user_op("step_at_half", lambda x, p: tf.cast(x > 0.5, x.dtype), lambda x, p: tf.ones_like(x))
    table = special_points(sweep(spec))
    assert len(table) == 1
    point = table.iloc[0]
    assert (point["status"], point["kind"], point["declared"], point["detected"]) == ("undeclared", "jump", False, True)
    assert point["x"] == 0.5  # located between two adjacent floats, then the roundest of them
    assert (point["forward_left"], point["forward_at"], point["forward_right"]) == (0.0, 0.0, 1.0)
    assert "forward jumps from 0 to 1" in point["note"]


def test_an_undeclared_kink_and_boundary():
    spec = _user_op("shifted_relu", lambda x, p: tf.nn.relu(x - 0.3), lambda x, p: tf.cast(x > 0.3, x.dtype))
    table = special_points(sweep(spec, n=1001))
    assert table["status"].tolist() == ["undeclared"]
    point = table.iloc[0]
    assert point["kind"] == "kink" and point["x"] == pytest.approx(0.3, abs=1e-6)
    assert "custom gradient jumps from 0 to 1" in point["note"]


def test_a_declared_point_that_is_not_there_is_not_detected():
    spec = _user_op(
        "smooth_with_a_claim",
        lambda x, p: tf.tanh(x),
        lambda x, p: 1.0 - tf.square(tf.tanh(x)),
        declared_points=lambda p, dtype: [ops.Point(1.0, "jump", "claimed")],
    )
    table = special_points(sweep(spec))
    assert table["status"].tolist() == ["not detected"]
    assert table["note"].iloc[0] == "claimed" and not table["detected"].iloc[0]


def test_a_steep_smooth_user_forward_is_not_a_jump():
    spec = _user_op("steep_tanh", lambda x, p: tf.tanh(300.0 * x), lambda x, p: tf.ones_like(x))
    assert special_points(sweep(spec)).empty


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_display_table_is_the_table_selected_renamed_with_none_for_missing_gradients(dtype):
    """display_table builds its frame in one go; it equals the plain pandas formulation, column types
    included, for every op (some have no special points, some a missing true gradient)."""
    import pandas as pd

    from explorer.explore.points import DISPLAY_COLUMNS, display_table

    for key in ops.names():
        table = special_points(sweep(key, dtype=dtype))
        expected = table[list(DISPLAY_COLUMNS)].rename(columns=DISPLAY_COLUMNS)
        expected["true gradient"] = [
            "None" if missing else f"{value:.6g}"
            for value, missing in zip(table["true_grad"], table["true_grad_missing"], strict=True)
        ]
        pd.testing.assert_frame_equal(display_table(table), expected, check_exact=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_zooming_two_rounds_per_evaluation_gives_the_table_of_one_round_per_evaluation(dtype, monkeypatch):
    """The look-ahead (one evaluation also covers the next zoom round) changes the number of calls, not the
    result: every op's table, and that of a staircase with hundreds of jumps (too many rows to look ahead), equal
    those zoomed one round per call, bit for bit."""
    import pandas as pd

    from explorer.explore import points

    @tf.custom_gradient
    def stairs(x):
        """Quantise to steps of 0.01 (straight-through)."""
        return tf.floor(x * 100.0) / 100.0, lambda dy: dy

    results = [sweep(key, dtype=dtype) for key in ops.names()] + [sweep(ops.from_function(stairs), n=20001, dtype=dtype)]
    with_look_ahead = [special_points(result) for result in results]
    assert len(with_look_ahead[-1]) > 50  # the staircase's jumps are found: too many rows to look ahead
    monkeypatch.setattr(points, "LOOKAHEAD_POINTS", 0)
    for result, table in zip(results, with_look_ahead, strict=True):
        pd.testing.assert_frame_equal(table, special_points(result), check_exact=True)
