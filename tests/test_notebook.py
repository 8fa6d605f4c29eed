"""explorer.sweep / plot / check / plot_training / interact: the app's own figures and the checker's own verdicts,
for a built-in key, an OpSpec and a team's decorated function."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import explorer
import ops
from explorer import notebook
from explorer.checker import guardrail, runner
from explorer.explore import figures
from explorer.explore import sweeps as explore_sweeps
from explorer.explore.points import special_points
from explorer.train.figures import loss_figure
from tests.reference import reference_for

ROOT = Path(__file__).resolve().parents[1]


@tf.custom_gradient
def hard_tanh_ste(x):
    """Straight-through clip: the gradient passes where |x| <= 1, so units saturated by the clip still learn."""

    def grad(dy):
        return dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype)

    return tf.clip_by_value(x, -1.0, 1.0), grad


@tf.custom_gradient
def scaled_tanh(x, slope=2.0):
    """tanh(slope * x) with its true gradient, a parameterised function for the sliders."""
    y = tf.tanh(slope * x)

    def grad(dy):
        return dy * slope * (1.0 - y * y)

    return y, grad


def targets():
    """A built-in key, an OpSpec (built-in, passed as an object) and a user's decorated function."""
    return [("key", "atan"), ("spec", ops.get("ste_sign")), ("function", hard_tanh_ste)]


def expected(target, x: np.ndarray, params: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(forward, custom gradient at dy = 1) at x, independently: tests/reference.py for a built-in (its formula
    from the op catalogue, at its defaults), the formula written here for hard_tanh_ste."""
    if target is hard_tanh_ste:
        return np.clip(x, -1.0, 1.0), (np.abs(x) <= 1.0).astype(np.float64)
    reference = reference_for(target if isinstance(target, str) else target.key)
    values = {**reference.defaults, **(params or {})}
    return reference.forward(x, values).astype(np.float64), reference.custom_grad(x, np.ones_like(x), values)


def drawn(trace) -> tuple[np.ndarray, np.ndarray]:
    """A line trace's points, without the gaps (None/NaN) a figure leaves at a jump."""
    x = np.asarray([np.nan if v is None else v for v in trace.x], np.float64)
    y = np.asarray([np.nan if v is None else v for v in trace.y], np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def line(figure, name: str):
    return next(trace for trace in figure.data if trace.name == name and trace.mode == "lines")


def runner_checks() -> list[str]:
    from explorer.checker import plan

    return list(plan.FUNCTION_CHECKS)


def _app_sweep(target, **kwargs):
    """What the Explore page sweeps: a key or spec as it is, a user function through ops.from_function."""
    op = ops.from_function(target) if ops.is_custom_gradient(target) else target
    return explore_sweeps.sweep(op, **kwargs)


def test_import_explorer_stays_light_and_lists_the_notebook_calls():
    code = (
        "import sys, explorer\n"
        "assert 'tensorflow' not in sys.modules and 'explorer.notebook' not in sys.modules\n"
        "print(' '.join(sorted(set(explorer.__all__) & {'sweep', 'plot', 'check', 'plot_training', 'interact'})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["check", "interact", "plot", "plot_training", "sweep"]


# -- sweep -------------------------------------------------------------------------------------------------
def test_sweep_takes_a_decorated_function_directly():
    result = explorer.sweep(hard_tanh_ste, lo=-2, hi=2, n=401)
    x = result["x"].to_numpy(np.float64)
    assert result.key == "hard_tanh_ste" and result.spec.family == "yours"
    np.testing.assert_array_equal(result["forward"], np.clip(x, -1.0, 1.0).astype(np.float32))
    np.testing.assert_array_equal(result["custom_grad"], (np.abs(x) <= 1.0).astype(np.float32))
    assert result.frame.loc[np.isclose(x, 1.0), "custom_grad"].item() == 1.0  # the convention AT the kink


@pytest.mark.parametrize("kind,target", targets(), ids=[kind for kind, _ in targets()])
def test_sweep_matches_the_formulas_and_the_apps_sweep(kind, target):
    mine = explorer.sweep(target, lo=-2.5, hi=2.0, n=301, dtype="float64")
    x = mine["x"].to_numpy(np.float64)
    assert x[0] == -2.5 and x[-1] == 2.0 and len(x) >= 301
    forward, custom = expected(target, x)
    np.testing.assert_allclose(mine["forward"], forward, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mine["custom_grad"], custom, rtol=1e-12, atol=1e-12)
    assert mine.frame.equals(_app_sweep(target, lo=-2.5, hi=2.0, n=301, dtype="float64").frame)  # the page's too


def test_a_function_is_made_an_op_once_so_slider_moves_do_not_retrace():
    explorer.sweep(scaled_tanh, n=101)
    spec = notebook.spec_of(scaled_tanh)
    traces = explore_sweeps.trace_count(spec)
    result = explorer.sweep(scaled_tanh, n=101, params={"slope": 3.0})
    assert notebook.spec_of(scaled_tanh) is spec and explore_sweeps.trace_count(spec) == traces
    x = result["x"].to_numpy(np.float64)
    np.testing.assert_allclose(result["custom_grad"], 3.0 * (1 - np.tanh(3.0 * x) ** 2), rtol=1e-5, atol=1e-5)


def test_not_a_target_is_a_clear_error():
    with pytest.raises(TypeError, match="a built-in op key, an ops.OpSpec, a @tf.custom_gradient function"):
        explorer.sweep(lambda x: x)
    with pytest.raises(KeyError, match="unknown op 'no_such_op'; valid ops: "):
        explorer.plot("no_such_op")
    with pytest.raises(ValueError, match="must be below hi"):
        explorer.sweep(hard_tanh_ste, lo=1, hi=-1)


# -- plot --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,target", targets(), ids=[kind for kind, _ in targets()])
@pytest.mark.parametrize("overlay", [False, True])
def test_plot_draws_the_formulas_as_the_explore_page_does(kind, target, overlay):
    mine = explorer.plot(target, lo=-2, hi=2, n=801, overlay=overlay)
    x, y = drawn(line(mine, "forward"))
    np.testing.assert_allclose(y, expected(target, x.astype(np.float32))[0], rtol=1e-6, atol=1e-6)
    x, y = drawn(line(mine, "custom gradient"))
    np.testing.assert_allclose(y, expected(target, x.astype(np.float32))[1], rtol=1e-5, atol=1e-6)
    result = _app_sweep(target, lo=-2, hi=2, n=801)
    # what explorer.ui.explore draws: main_figure_spec of the sweep and its special-points table
    app = figures.as_figure(figures.main_figure_spec(result, special_points(result), overlay=overlay))
    assert mine.to_json() == app.to_json()


def test_plot_draws_the_users_gradient_and_marks_its_kinks():
    fig = explorer.plot(hard_tanh_ste, lo=-2, hi=2, n=401)
    (custom,) = [trace for trace in fig.data if trace.name == "custom gradient" and trace.mode == "lines"]
    x, y = np.asarray(custom.x, np.float64), np.asarray(custom.y, np.float64)
    drawn = np.isfinite(y)
    np.testing.assert_array_equal(y[drawn], (np.abs(x[drawn]) <= 1.0).astype(float))
    undeclared = [trace for trace in fig.data if trace.name == "undeclared point"]
    marked = {round(float(v), 3) for trace in undeclared for v in trace.x if v is not None and np.isfinite(v)}
    assert marked == {-1.0, 1.0}  # the two kinks, found in the sweep (nothing was declared)
    assert "hard_tanh_ste" in fig.layout.title.text


def test_plot_of_a_list_overlays_each_custom_gradient_as_the_pages_compare_figure():
    mine = explorer.plot(["atan", ops.get("ste_sign"), hard_tanh_ste], lo=-2, hi=2, n=501)
    for name, target in (("atan", "atan"), ("ste_sign", ops.get("ste_sign")), ("hard_tanh_ste", hard_tanh_ste)):
        x, y = drawn(line(mine, name))
        np.testing.assert_allclose(y, expected(target, x.astype(np.float32))[1], rtol=1e-5, atol=1e-6)
    sweeps = [_app_sweep(t, lo=-2, hi=2, n=501) for t in ("atan", ops.get("ste_sign"), hard_tanh_ste)]
    app = figures.compare_figure(sweeps, ["atan", "ste_sign", "hard_tanh_ste"],
                                 [special_points(s) for s in sweeps])  # fmt: skip
    assert mine.to_json() == app.to_json()
    assert [t.name for t in mine.data if t.mode == "lines" and t.showlegend is not False][:3] == [
        "atan", "ste_sign", "hard_tanh_ste"
    ]


def test_plot_takes_sweeps_and_labels_them_by_their_changed_parameters():
    sweeps = [explorer.sweep(scaled_tanh, n=201, params={"slope": s}) for s in (2.0, 5.0)]
    fig = explorer.plot(sweeps)
    names = [trace.name for trace in fig.data if trace.mode == "lines" and "special" not in trace.name]
    assert names == ["scaled_tanh", "scaled_tanh (slope=5)"]
    for name, slope in (("scaled_tanh", 2.0), ("scaled_tanh (slope=5)", 5.0)):
        x, y = drawn(line(fig, name))
        np.testing.assert_allclose(y, slope * (1 - np.tanh(slope * x) ** 2), rtol=1e-4, atol=1e-5)  # float32
    assert explorer.plot(sweeps[1]).to_json() == figures.main_figure(sweeps[1], special_points(sweeps[1])).to_json()


# -- check -------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("kind,target", targets(), ids=[kind for kind, _ in targets()])
def test_check_gives_the_checkers_verdicts(kind, target):
    report = explorer.check(target)
    # every one is right: the built-ins pass every check, and hard_tanh_ste's gradient is the true derivative of
    # its clip, 1 inside [-1, 1] and 0 outside, on the sweep's grid (which does not hold the kinks +-1 themselves)
    assert [(c.name, c.level) for c in report.checks] == [(name, "pass") for name in runner_checks()]
    if kind == "function":
        assert {c.name: c for c in report.checks}["vs_autodiff"].message == "the custom gradient equals the true gradient (numerical) on all 2001 finite points"
    if kind == "function":
        expected = guardrail.custom_gradient_checks(target)  # what assert_custom_gradient runs
        name = "hard_tanh_ste"
    else:
        expected = runner.check(target)  # what python -m explorer verify runs
        name = ops.get(target).key
    assert list(report.checks) == expected
    assert report.frame.columns.tolist() == ["op", "check", "level", "message"]
    assert report.frame["check"].tolist() == [c.name for c in expected]
    assert report.frame["level"].tolist() == [c.level for c in expected]
    assert set(report.frame["op"]) == {name}
    assert report.ok == all(c.passed for c in expected) and report.ok


@pytest.mark.slow
def test_a_failing_function_is_not_ok_and_its_failures_come_first_in_red():
    from examples.pitfall_reduce_sum import double_with_summed_grad

    report = explorer.check(double_with_summed_grad)
    assert not report.ok
    levels = report.frame["level"].tolist()
    assert levels[report.frame["check"].tolist().index("shape_dtype")] == "fail"
    shown = re.findall(r'data-level="(\w+)"', report._repr_html_())
    order = {"fail": 0, "warn": 1, "pass": 2}
    assert shown == sorted(levels, key=order.get)  # every check shown, failures first
    first_row = report._repr_html_().split("<tbody>")[1].split("</tr>")[0]
    assert notebook.LEVEL_STYLES["fail"][1] in first_row and "shape_dtype" in first_row
    assert "FAILED" in repr(report).splitlines()[0]


def test_the_report_escapes_messages_and_keeps_the_checkers_order():
    from explorer.checker.common import Check

    checks = (Check("finite", True, "ok"), Check("graph", False, "x <b>broke</b>", "fail"),
              Check("vs_autodiff", True, "no why", "warn"))  # fmt: skip
    report = notebook.CheckReport("mine", checks)
    page = report._repr_html_()
    assert html.escape("x <b>broke</b>") in page and "<b>broke</b>" not in page
    assert re.findall(r'data-level="(\w+)"', page) == ["fail", "warn", "pass"]
    assert report.frame["check"].tolist() == ["finite", "graph", "vs_autodiff"] and not report.ok
    assert report.summary() == "mine: FAILED, 3 checks: 1 pass, 1 warn, 1 fail, 0 skip"


@pytest.mark.slow
def test_check_forward_mode_is_opt_in_for_a_function_and_an_op():
    from examples.binarize import binarize
    from examples.square import CustomSquareLayer

    report = explorer.check(binarize, forward_mode=True)
    assert report.frame["check"].tolist() == [*runner_checks(), "forward_mode"]
    assert report.checks[-1].level == "warn" and report.ok  # sign's JVP is 0 inside tf.function: a warning
    assert "forward_mode" not in explorer.check(binarize).frame["check"].tolist()
    op_report = explorer.check("relu_at_zero", forward_mode=True)
    assert op_report.checks[-1].name == "forward_mode" and op_report.checks[-1].level == "pass"
    with pytest.raises(TypeError, match="no forward_mode"):
        explorer.check(CustomSquareLayer, forward_mode=True)


@pytest.mark.slow
def test_check_of_a_layer_class_runs_the_layer_checks():
    from examples.square import CustomSquareLayer

    report = explorer.check(CustomSquareLayer)
    assert report.frame["check"].tolist() == ["keras_fit", "input_gradient", "keras_save", "saved_model"]
    # it calls square_with_scaled_grad and is not registered with Keras: a warning, not a failure
    assert report.frame["level"].tolist() == ["pass", "pass", "warn", "pass"] and report.ok
    assert "custom gradient of square_with_scaled_grad" in report.checks[1].message
    assert "not registered" in report.checks[2].message
    assert set(report.frame["op"]) == {"CustomSquareLayer"}
    assert list(report.checks) == guardrail.custom_gradient_checks(CustomSquareLayer)


def test_check_refuses_declarations_for_a_built_in_op():
    with pytest.raises(TypeError, match="declarations are for your own function"):
        explorer.check("atan", points=[(0.0, "jump")])
    with pytest.raises(TypeError, match="expected a built-in op key"):
        explorer.check(3.0)


# -- a Keras layer -----------------------------------------------------------------------------------------
def test_a_layer_is_swept_through_itself():
    from examples.square import CustomSquareLayer

    result = explorer.sweep(CustomSquareLayer, n=61, dtype="float64")
    x = result["x"].to_numpy(np.float64)
    np.testing.assert_allclose(result["forward"], x * x, rtol=1e-6)
    np.testing.assert_allclose(result["custom_grad"], x, rtol=1e-6, atol=1e-6)  # half of autodiff, by design
    np.testing.assert_allclose(result["true_grad"], 2 * x, rtol=1e-6, atol=1e-6)  # float64 twin: a clean difference


def test_a_layer_with_a_weight_is_swept_with_its_weight():
    import keras

    class ScaledSign(keras.layers.Layer):
        """A straight-through sign times a learnt scale (initialised to 2)."""

        def build(self, input_shape):
            self.scale = self.add_weight(shape=(), initializer=keras.initializers.Constant(2.0))

        def call(self, inputs):
            return self.scale * hard_tanh_ste(inputs * 1e3)  # ~sign(x), gradient passes where |x| <= 1e-3

    result = explorer.sweep(ScaledSign, lo=-1, hi=1, n=201)
    x = result["x"].to_numpy(np.float64)
    np.testing.assert_allclose(result["forward"], 2.0 * np.clip(x * 1e3, -1, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result["custom_grad"], 2e3 * (np.abs(x) <= 1e-3), rtol=1e-5)
    assert explorer.plot(ScaledSign).layout.title.text.startswith("ScaledSign (Keras layer)")


# -- training ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_plot_training_is_the_train_pages_loss_figure():
    results = explorer.train.compare(task="xor", runs=[ops.from_function(hard_tanh_ste), "ste_sign"], epochs=3, width=8)
    fig = explorer.plot_training(results)
    labels = [r.run.label for r in results]
    assert fig.to_json() == loss_figure([r.history for r in results], labels).to_json()
    assert [trace.name for trace in fig.data] == ["hard_tanh_ste (custom)", "ste_sign (custom)"]
    for trace, result in zip(fig.data, results, strict=True):
        loss = np.asarray(trace.y, np.float64)
        np.testing.assert_array_equal(loss, result.history["loss"].to_numpy())
        np.testing.assert_array_equal(np.asarray(trace.x), np.arange(1, 4))  # epochs 1, 2, 3
        assert result.status == "ok" and np.isfinite(loss).all()
    assert explorer.plot_training(results[0]).data[0].name == "hard_tanh_ste (custom)"
    with pytest.raises(ValueError, match="metric must be a column"):
        explorer.plot_training(results, metric="nope")


# -- interact ----------------------------------------------------------------------------------------------
def _trace(panel, name: str):
    return next(trace for trace in panel.figure.data if trace.name == name and trace.mode == "lines")


def test_interact_redraws_the_same_figure_when_a_slider_moves():
    panel = explorer.interact(scaled_tanh, n=201)
    figure = panel.figure
    assert set(panel.controls) == {"slope", "lo", "hi", "n", "dtype", "upstream", "overlay"}
    assert panel.controls["slope"].value == 2.0
    before = np.asarray(_trace(panel, "custom gradient").y, np.float64).copy()
    panel.controls["slope"].value = 4.0  # as a user drags the slider
    assert panel.figure is figure  # updated in place
    after = _trace(panel, "custom gradient")
    x, y = np.asarray(after.x, np.float64), np.asarray(after.y, np.float64)
    np.testing.assert_allclose(y, 4.0 * (1 - np.tanh(4.0 * x) ** 2), rtol=1e-4, atol=1e-5)  # float32 rounding
    assert not np.array_equal(before, y)
    assert _figure_json(explorer.plot(scaled_tanh, n=201, params={"slope": 4.0})) == _figure_json(figure)


def _figure_json(figure) -> str:
    """A figure (a FigureWidget or a Figure) as validated plotly JSON, so that the two compare."""
    import plotly.graph_objects as go

    return go.Figure(figure.to_dict()).to_json()


@pytest.mark.parametrize("kind,target", targets(), ids=[kind for kind, _ in targets()])
def test_interact_range_and_dtype_controls_match_plot(kind, target):
    panel = explorer.interact(target, n=301)
    panel.controls["hi"].value = 1.5
    panel.controls["dtype"].value = "float64"
    x, y = drawn(_trace(panel, "custom gradient"))
    assert x.min() == -3.0 and x.max() == 1.5
    np.testing.assert_allclose(y, expected(target, x)[1], rtol=1e-12, atol=1e-12)  # float64: exact to rounding
    assert _figure_json(panel.figure) == _figure_json(explorer.plot(target, hi=1.5, n=301, dtype="float64"))
    assert "float64 · x in [-3, 1.5], " in panel.figure.layout.title.subtitle.text


def test_interact_explains_a_bad_value_and_keeps_the_figure():
    panel = explorer.interact("atan", n=101)
    shown = _figure_json(panel.figure)
    panel.controls["lo"].value = 5.0  # above hi
    assert "lo (5) must be below hi (3)" in panel.message.value
    assert _figure_json(panel.figure) == shown
    panel.controls["lo"].value = -1.0
    assert panel.message.value == ""


def test_interact_without_ipywidgets_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets now raises ImportError
    with pytest.raises(ImportError, match=re.escape("pip install gradient-explorer[notebook]")):
        explorer.interact("atan")


def test_interact_says_when_your_op_raises_instead_of_losing_it_in_the_widget_log(monkeypatch):
    panel = explorer.interact("atan", n=101)
    shown = _figure_json(panel.figure)

    def raising_plot(*args, **kwargs):
        raise RuntimeError("the backward hit a bug")

    monkeypatch.setattr(notebook, "plot", raising_plot)
    panel.controls["alpha"].value = 3.0
    assert "your op raised RuntimeError: the backward hit a bug" in panel.message.value
    assert _figure_json(panel.figure) == shown
