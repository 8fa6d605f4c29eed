"""The Explore and Train pages with your own ops: GRADIENT_EXPLORER_OPS pointing at examples/ (AppTest, no browser)."""

import concurrent.futures
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from explorer import loaded
from explorer.checker import backends as across
from explorer.ui import backends_panel
from tests.test_explore_page import _trace, _values

pytestmark = pytest.mark.slow  # the examples' ops run in worker processes (each starts TensorFlow)

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 120
MISSING = "no_such_module_for_the_page"
# what each example shows: a figure, or a message naming the problem in its place
FAILS_WITH = {
    "double_with_summed_grad": "gradient has shape ()",
    "identity_with_float64_grad": "gradient has dtype float64",
    # functions of several inputs whose backward fails: the inputs it was called with and the exception
    "matmul_no_transpose": "a (2, 3), b (3, 4) (float64): the backward raised",
    "product_one_gradient": "x (4, 3), y (4, 3) (float64): the backward raised",
    "gained": "must accept keyword argument 'variables'",  # reads a variable, its backward takes no variables=
    # keras.ops.custom_gradient whose forward returns no backward (examples/backends_pitfalls.py): TensorFlow
    # refuses every call, so no input is found; the page names that (torch would give a NaN gradient instead)
    "forgotten_grad": "no input shapes found that forgotten_grad accepts",
    # its backward returns mean(upstream), one number for a vector input: TensorFlow accepts it, the page does not
    "mean_upstream": "mean_upstream's gradient has shape () for x of shape (7,)",
    "float16_backward": "float16_backward's gradient has dtype float16 for x of dtype float32",  # cast to float16
}


COMPARED = "clip_ste"  # examples/backends_portable.py: the one function whose backends panel is computed here
_NEVER_DONE: concurrent.futures.Future = concurrent.futures.Future()


@pytest.fixture(scope="module")
def examples_env():
    """examples/ loaded. The Explore page's backends panel compares only :data:`COMPARED` (a JAX and a torch worker,
    tens of CPU seconds a function); every other keras.ops function's panel stays pending, as while it computes."""
    compare = backends_panel._future
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(loaded.OPS_ENV, f"examples,{MISSING}")
        patch.chdir(ROOT)
        patch.setattr(backends_panel, "_future", lambda target, name, lo, hi: (
            compare(target, name, lo, hi) if name == COMPARED else _NEVER_DONE))  # fmt: skip
        loaded.reset()
        yield loaded.current()
    loaded.reset()


def _app(query: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    return app.run()


def _figure(app: AppTest, key: str = "main_figure") -> dict:
    chart = next(c for c in app.get("plotly_chart") if c.proto.id and key in c.proto.id or c.key == key)
    return json.loads(chart.proto.spec)


@pytest.fixture(scope="module")
def square_app(examples_env) -> AppTest:
    return _app({"op": "square_with_scaled_grad"})


def test_a_missing_module_is_reported_and_the_page_works(square_app):
    assert not square_app.exception
    # the missing module only: every example of any signature is drawn (tests/test_signature_page.py)
    [error] = [e.value for e in square_app.error]
    assert f"Could not load `{MISSING}`" in error and "ModuleNotFoundError" in error


def test_square_shows_its_numerical_true_gradient_and_half_of_it(square_app):
    app = square_app
    assert app.title[0].value == "square_with_scaled_grad"
    assert any("Yours · square" in c.value for c in app.caption)
    figure = _figure(app)
    titles = [a["text"] for a in figure["layout"]["annotations"]]
    assert "True gradient (numerical)" in titles
    true = _trace(figure, "true gradient (numerical)")
    custom = _trace(figure, "custom gradient")
    x = _values(custom, "x")
    np.testing.assert_allclose(_values(custom, "y"), x, rtol=1e-6, atol=1e-6)  # 0.5 * 2x
    np.testing.assert_allclose(_values(true, "y"), 2 * _values(true, "x"), rtol=1e-3, atol=1e-3)
    assert app.query_params["op"] == "square_with_scaled_grad"
    labels = [button.proto.label for button in app.get("download_button")]
    assert labels == ["Sweep as CSV (2,001 rows)", "Download this view (HTML)"]


def test_the_checks_appear_once_done(square_app):
    app = square_app
    loaded.checks("square_with_scaled_grad", {}).result(timeout=TIMEOUT)
    app.run()
    checks = app.dataframe[-1].value
    assert list(checks["check"]) == [
        "finite", "shape_dtype", "graph", "keras_fit", "special_points", "vs_autodiff", "kink", "saved_model", "second_order"
    ]
    row = checks[checks["check"] == "vs_autodiff"].iloc[0]
    # examples/square.py declares why in its GRADIENT_EXPLORER dict: the halved gradient is intentional
    assert row["result"].endswith("pass") and row["message"].startswith("intentional: the custom gradient is half of")
    assert "Why: a textbook example" in row["message"]
    assert "**Why.** a textbook example: the gradient is deliberately half of autodiff" in [i.value for i in app.info][0]


def test_the_downloaded_view_of_a_loaded_op_holds_its_checks(examples_env, monkeypatch):
    from tests.view_file import read_view, recording_downloads

    downloads = recording_downloads(monkeypatch)
    app = _app({"op": "square_with_scaled_grad"})
    results = loaded.checks("square_with_scaled_grad", {}).result(timeout=TIMEOUT)
    view = read_view(downloads["square_with_scaled_grad_view.html"]())
    from explorer.explore.view_html import LEVEL_ORDER

    assert view.check_rows == [(c.level, c.name, c.message) for c in sorted(results, key=lambda c: LEVEL_ORDER[c.level])]
    assert ("pass", "vs_autodiff") in [row[:2] for row in view.check_rows]
    assert any(message.startswith("intentional: the custom gradient is half of") for _, _, message in view.check_rows)
    assert [t.get("name") for t in view.figures[0]["data"]] == [t.get("name") for t in _figure(app)["data"]]


def test_every_example_op_renders_or_shows_its_message(examples_env):
    app = _app()
    for key in examples_env.ops:
        app.selectbox(key="w.op").set_value(key).run()
        assert not app.exception, key
        assert app.title[0].value == key
        errors = [e.value for e in app.error if "Your op failed" in e.value]
        if key in FAILS_WITH:
            assert len(errors) == 1 and FAILS_WITH[key] in errors[0].replace("\\", ""), (key, errors)
            assert not [c for c in app.get("plotly_chart") if c.proto.id and "main_figure" in c.proto.id]
        else:
            assert not errors, (key, errors)
            figure = _figure(app)
            assert _trace(figure, "true gradient (numerical)") is not None
        # the rest of the page works: the sidebar keeps its controls, compare and downloads are there
        assert app.number_input(key="w.lo").value == -3.0
    # the NumPy backward is shown, eagerly, with its graph failure next to the figure
    app.selectbox(key="w.op").set_value("tanh_with_numpy_grad").run()
    custom = _trace(_figure(app), "custom gradient")
    x = _values(custom, "x")
    np.testing.assert_allclose(_values(custom, "y"), 1 - np.tanh(x) ** 2, rtol=1e-5, atol=1e-6)
    assert any("Fails inside" in w.value and "numpy" in w.value for w in app.warning)


@pytest.mark.skipif(not (across.installed("jax") and across.installed("torch")), reason="needs JAX and torch")
def test_the_backends_panel_draws_a_portable_function_on_each_backend_and_passes_it(examples_env):
    app = _app({"op": COMPARED})
    assert any("Running it on the other installed Keras backends" in c.value for c in app.caption)  # pending
    target, name = backends_panel.keras_function(COMPARED)
    backends_panel._future(target, name, -3.0, 3.0).result(timeout=600)  # the page's default range
    app.run()  # what the panel's polling fragment does once the comparison is done
    assert not app.exception and "Other Keras backends" in [h.value for h in app.subheader]
    assert any(s.value.startswith("**backends: pass.**") for s in app.success)
    traces = _figure(app, "backends_figure")["data"]
    for backend in ("tensorflow", "jax", "torch"):  # clip_ste: forward clip(x, -1, 1), gradient 1 where |x| <= 1
        forward, gradient = [t for t in traces if t.get("name") == backend]
        x = _values(forward, "x")
        assert len(x) == backends_panel.POINTS and x[0] == -3.0 and x[-1] == 3.0
        np.testing.assert_allclose(_values(forward, "y"), np.clip(x, -1.0, 1.0), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(_values(gradient, "y"), (np.abs(x) <= 1.0).astype(np.float64))


def test_a_keyword_parameter_has_a_slider_that_changes_the_figure(examples_env):
    app = _app({"op": "fast_sigmoid_spike"})
    slope = app.slider(key="w.p.fast_sigmoid_spike.slope")
    assert slope.value == 25.0 and (slope.min, slope.max) == (2.5, 250.0)
    for value in (25.0, 100.0):
        slope.set_value(value).run()
        custom = _trace(_figure(app), "custom gradient")
        x, g = _values(custom, "x"), _values(custom, "y")
        np.testing.assert_allclose(g, 1 / (value * np.abs(x) + 1) ** 2, rtol=1e-5, atol=1e-7)
    assert app.query_params["p.slope"] == "100"
    # the keyword pitfall: a slider too, and the note on how it is passed
    app.selectbox(key="w.op").set_value("scaled_identity").run()
    app.slider(key="w.p.scaled_identity.slope").set_value(50.0).run()
    np.testing.assert_allclose(_values(_trace(_figure(app), "custom gradient"), "y"), 50.0)
    assert any("keyword parameter" in i.value for i in app.info)


def test_compare_a_loaded_op_with_a_built_in(examples_env):
    app = _app({"op": "square_with_scaled_grad", "cmp": "ops", "cmp_ops": "square_with_scaled_grad,ste_sign"})
    assert not app.exception and not app.warning
    figure = _figure(app, "compare_figure")
    mine, builtin = _trace(figure, "square_with_scaled_grad"), _trace(figure, "ste_sign")
    np.testing.assert_allclose(_values(mine, "y"), _values(mine, "x"), rtol=1e-6, atol=1e-6)
    x, g = _values(builtin, "x"), _values(builtin, "y")
    assert np.all(g[np.abs(x) < 0.99] == 1.0) and np.all(g[np.abs(x) > 1.01] == 0.0)
    # a broken op in the comparison: a message instead of the compare figure; the main figure stays
    app.multiselect(key="w.cmp_ops").set_value(["ste_sign", "double_with_summed_grad"]).run()
    assert any("Cannot compare" in e.value and "shape ()" in e.value for e in app.error)
    assert _trace(_figure(app), "custom gradient") is not None and not app.exception
    app.multiselect(key="w.cmp_ops").set_value(["square_with_scaled_grad", "ste_sign"]).run()
    # one loaded op at several values of its parameter
    app.selectbox(key="w.op").set_value("fast_sigmoid_spike").run()
    app.radio(key="w.cmp").set_value("param").run()
    app.text_input(key="w.cmp_values").set_value("10, 40").run()
    figure = _figure(app, "compare_figure")
    for value in (10, 40):
        trace = _trace(figure, f"slope = {value}")
        np.testing.assert_allclose(_values(trace, "y"), 1 / (value * np.abs(_values(trace, "x")) + 1) ** 2, rtol=1e-5, atol=1e-7)


def test_a_url_restores_a_loaded_op_and_names_an_unknown_one(examples_env):
    app = _app({"op": "fast_sigmoid_spike", "p.slope": "50", "lo": "-1", "hi": "2"})
    # no URL notice; the one warning is the spike's undeclared jump at 0
    assert [w.value.split(" at ")[0] for w in app.warning] == ["Undeclared special point"]
    assert app.title[0].value == "fast_sigmoid_spike"
    assert app.slider(key="w.p.fast_sigmoid_spike.slope").value == 50.0
    x = _values(_trace(_figure(app), "forward"), "x")
    assert np.nanmin(x) == -1.0 and np.nanmax(x) == 2.0
    app = _app({"op": "not_loaded_here"})
    assert app.title[0].value == "Straight-through sign"
    assert any("Unknown op 'not_loaded_here'" in w.value.replace("\\", "") for w in app.warning)


def test_train_page_runs_a_loaded_function_and_a_loaded_layer(examples_env):
    import pandas as pd

    from tests.test_train_page import _finish, train_app

    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.session_state["train.runs_seed"] = pd.DataFrame(
        {
            "op": [
                "fast_sigmoid_spike", "fast_sigmoid_spike", "CustomSquareLayer", "CustomSquareLayer",
                "tanh_with_numpy_grad", "double_with_summed_grad",
            ],
            "gradient": ["custom", "true", "custom", "true", "custom", "custom"],
            "params": ["slope=10", "", "", "", "", ""],
        }
    )
    app.run()
    app.number_input(key="train.epochs").set_value(3).run()
    app.button[0].click().run()  # Start
    app = _finish(app)
    assert not app.exception
    table = app.dataframe[-1].value
    assert table["run"].tolist() == [
        "fast_sigmoid_spike (custom, slope=10)", "fast_sigmoid_spike (true)",
        "CustomSquareLayer (custom)", "CustomSquareLayer (true)", "tanh_with_numpy_grad (custom)",
    ]  # fmt: skip
    assert table["epochs"].tolist() == [3, 3, 3, 3, 0]
    # the spike's numerical true gradient is zero off the jump: nothing before it learns
    assert table["status"].tolist() == ["ok", "no_gradient", "ok", "ok", "failed"]
    # NumPy in a backward fails inside Model.fit: that run only, with the message
    [error] = [e.value for e in app.error]
    assert "tanh\\_with\\_numpy\\_grad (custom)** failed while training" in error and "numpy" in error
    # a gradient of the wrong shape is refused before training, with the Explore page's message
    assert any("Run 6" in w.value and "shape ()" in w.value for w in app.warning)
