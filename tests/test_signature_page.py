"""The Explore page with loaded functions of any signature (GRADIENT_EXPLORER_OPS=examples, AppTest, no browser):
each shape renders, its controls change the figure, the URL restores the view, a bad URL value is a notice."""

from pathlib import Path

import numpy as np
import pytest

from explorer import loaded
from explorer.explore import signature_views as sv
from tests.test_explore_page import _trace, _values
from tests.test_yours_page import _app, _figure

pytestmark = pytest.mark.slow  # the examples' ops run in worker processes (each starts TensorFlow)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def examples_env():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(loaded.OPS_ENV, "examples")
        patch.chdir(ROOT)
        loaded.reset()
        yield loaded.current()
    loaded.reset()


def _curve(app, name: str) -> tuple[np.ndarray, np.ndarray]:
    trace = _trace(_figure(app), name)
    x, y = _values(trace, "x"), _values(trace, "y")
    finite = np.isfinite(x) & np.isfinite(y)
    assert finite.sum() > 100
    return x[finite], y[finite]


def _no_trouble(app) -> None:
    assert not app.exception
    assert [e.value for e in app.error] == []


def test_grad_reverse_slider_picker_and_url(examples_env):
    app = _app({"op": "grad_reverse"})
    _no_trouble(app)
    assert any("elementwise in every input" in i.value for i in app.info)
    x, custom = _curve(app, "custom gradient")
    np.testing.assert_allclose(custom, -np.ones_like(x))  # -lam with lam at its default 1
    _, true = _curve(app, "true gradient (numerical)")
    np.testing.assert_allclose(true, np.ones_like(true), rtol=1e-6)
    shaded = [shape for shape in _figure(app)["layout"].get("shapes", []) if shape.get("name") == "custom ≠ true gradient"]
    assert shaded and shaded[0]["x0"] == -3.0 and shaded[0]["x1"] == 3.0  # -lam against 1 on the whole sweep
    app.slider(key="w.i.grad_reverse.lam").set_value(0.5).run()
    _no_trouble(app)
    _, custom = _curve(app, "custom gradient")
    np.testing.assert_allclose(custom, np.full_like(custom, -0.5))
    assert app.query_params["i.lam"] == "0.5"
    app.selectbox(key="w.wrt").set_value("lam").run()  # the gradient with respect to lam: None from the backward
    _, custom = _curve(app, "custom gradient")
    np.testing.assert_allclose(custom, np.zeros_like(custom))
    assert app.query_params["wrt"] == "lam"
    restored = _app({"op": "grad_reverse", "i.lam": "0.25"})
    _no_trouble(restored)
    _, custom = _curve(restored, "custom gradient")
    np.testing.assert_allclose(custom, np.full_like(custom, -0.25))


def test_grad_reverse_compares_values_of_lam(examples_env):
    app = _app({"op": "grad_reverse"})
    figure = _figure(app, "compare_figure")
    names = {trace.get("name") for trace in figure["data"]}
    assert {"lam = -2", "lam = 1", "lam = 2"} <= names


def test_the_downloaded_view_of_grad_reverse_holds_its_figures_checks_and_inputs(examples_env, monkeypatch):
    from urllib.parse import parse_qs, urlsplit

    from tests.view_file import read_view, recording_downloads

    downloads = recording_downloads(monkeypatch)
    app = _app({"op": "grad_reverse", "i.lam": "0.5"})
    _no_trouble(app)
    results = loaded.checks("grad_reverse", {}).result(timeout=120)
    view = read_view(downloads["grad_reverse_view.html"]())
    for drawn, key in zip(view.figures, ("main_figure", "compare_figure"), strict=True):
        assert [t.get("name") for t in drawn["data"]] == [t.get("name") for t in _figure(app, key)["data"]]
    custom = _trace(view.figures[0], "custom gradient")
    np.testing.assert_allclose(_values(custom, "y"), -0.5)  # -lam, lam held at 0.5
    assert sorted(name for _, name, _ in view.check_rows) == sorted(check.name for check in results)
    assert parse_qs(urlsplit(view.links[0]).query)["i.lam"] == ["0.5"]


def test_safe_norm_draws_its_line_and_the_seed_redraws_it(examples_env):
    app = _app({"op": "safe_norm.safe_norm", "seed": "4", "origin": "1"})
    _no_trouble(app)
    assert any("not elementwise" in i.value for i in app.info)
    assert any("s(t) = ⟨w, f(x(t))⟩ with w all ones" in c.value for c in app.caption)
    layout = loaded.layout("safe_norm.safe_norm")
    _, u, _ = sv.line(layout, "x", 4, origin=True)
    t, forward = _curve(app, "forward")
    # float32 sweep: on a line through 0 every row's norm is |t| ‖u_r‖
    np.testing.assert_allclose(forward, np.abs(t) * np.linalg.norm(u, axis=-1).sum(), rtol=1e-5, atol=1e-6)
    t, custom = _curve(app, "custom gradient")
    assert custom[t == 0.0].tolist() == [0.0]  # the backward's subgradient at the zero vector
    axes = _figure(app)["layout"]
    assert (axes["xaxis"]["title"]["text"], axes["yaxis"]["title"]["text"], axes["yaxis2"]["title"]["text"]) == (
        "t", "s(t)", "ds/dt",
    )
    shapes = axes.get("shapes", [])
    assert not [s for s in shapes if s.get("name") == "custom ≠ true gradient"]  # equal off the kink
    assert app.query_params["seed"] == "4" and app.query_params["origin"] == "1"
    app.button[[b.label for b in app.button].index("New line")].click().run()
    _no_trouble(app)
    assert app.query_params["seed"] == "5"
    _, u5, _ = sv.line(layout, "x", 5, origin=True)
    t, forward = _curve(app, "forward")
    np.testing.assert_allclose(forward, np.abs(t) * np.linalg.norm(u5, axis=-1).sum(), rtol=1e-5, atol=1e-6)
    assert any("no scalar input" in c.value for c in app.caption)  # compare: says why not


def test_sin_cos_output_picker_and_url(examples_env):
    app = _app({"op": "sin_cos"})
    _no_trouble(app)
    x, forward = _curve(app, "forward")
    np.testing.assert_allclose(forward, np.sin(x), atol=1e-6)
    app.selectbox(key="w.out").set_value(1).run()
    x, forward = _curve(app, "forward")
    np.testing.assert_allclose(forward, np.cos(x), atol=1e-6)
    assert app.query_params["out"] == "1"
    summed = _app({"op": "sin_cos", "out": "sum"})
    x, custom = _curve(summed, "custom gradient")
    np.testing.assert_allclose(custom, np.cos(x) - np.sin(x), atol=1e-5)


def test_matmul_line_and_a_broken_matmul(examples_env):
    app = _app({"op": "matmul"})
    _no_trouble(app)
    layout = loaded.layout("matmul")
    a0, u, fixed = sv.line(layout, "a", 0)
    t, forward = _curve(app, "forward")
    expected = np.array([np.sum((a0 + s * u) @ fixed["b"]) for s in t])
    np.testing.assert_allclose(forward, expected, rtol=1e-4, atol=1e-4)
    broken = _app({"op": "matmul_no_transpose"})
    assert not broken.exception
    [error] = [e.value for e in broken.error]
    assert "a (2, 3), b (3, 4)" in error and "backward raised" in error
    assert broken.title[0].value == "matmul_no_transpose"  # the rest of the page is there


def test_invalid_url_values_are_notices_and_the_default_view(examples_env):
    app = _app({"op": "grad_reverse", "i.lam": "abc", "in": "nope", "seed": "-3"})
    assert not app.exception
    notices = " ".join(w.value for w in app.warning)
    assert "Input 'lam'" in notices and "'in' = 'nope'" in notices and "'seed' = '-3'" in notices
    _, custom = _curve(app, "custom gradient")
    np.testing.assert_allclose(custom, -np.ones_like(custom))


def test_train_lists_what_its_model_cannot_hold_and_refuses_it(examples_env):
    import pandas as pd
    from streamlit.testing.v1 import AppTest

    from tests.test_train_page import train_app

    app = AppTest.from_function(train_app, default_timeout=120).run()
    app.session_state["train.runs_seed"] = pd.DataFrame(
        {"op": ["grad_reverse", "sin_cos"], "gradient": ["custom", "custom"], "params": ["", ""]}
    )
    app.run()
    assert not app.exception
    (box,) = [e for e in app.expander if "cannot be trained" in e.label]
    (table,) = box.dataframe
    reasons = dict(zip(table.value["function"], table.value["reason"], strict=True))
    assert "takes 2 tensor inputs (x, lam)" in reasons["grad_reverse"]
    assert "has 2 outputs" in reasons["sin_cos"] and "is not elementwise" in reasons["safe_norm.safe_norm"]
    assert box.label.startswith(f"{len(reasons)} loaded function(s)")
    refused = " ".join(w.value for w in app.warning).replace("\\", "")
    assert "Run 1: grad_reverse is unavailable for training" in refused and "Run 2: sin_cos is unavailable" in refused


def test_compare_several_ops_says_why_a_view_is_left_out(examples_env):
    app = _app({"op": "square_with_scaled_grad", "cmp": "ops", "cmp_ops": "square_with_scaled_grad,grad_reverse"})
    assert not app.exception
    notes = " ".join(c.value for c in app.caption).replace("\\", "")
    assert "grad_reverse is left out of this comparison" in notes
    names = {trace.get("name") for trace in _figure(app, "compare_figure")["data"]}
    assert "square_with_scaled_grad" in names and "grad_reverse" not in names


def test_the_compare_of_an_input_is_in_the_url(examples_env):
    app = _app({"op": "grad_reverse", "cmp_in": "lam", "cmp_in_values": "0.5,1.5"})
    assert not app.exception
    names = {trace.get("name") for trace in _figure(app, "compare_figure")["data"]}
    assert {"lam = 0.5", "lam = 1.5"} <= names and "lam = -2" not in names
    app.text_input(key="w.sig_values").set_value("0.25, 9").run()
    assert app.query_params["cmp_in_values"] == "0.25"
    assert any("'9': lam must be a number in [-2, 2]" in w.value.replace("\\", "") for w in app.warning), [w.value for w in app.warning]


def test_state_round_trips_every_new_control(examples_env):
    from explorer import state as url_state

    query = {
        "op": "sin_cos", "out": "sum", "seed": "12", "origin": "1",
    }  # fmt: skip
    state, notices = url_state.from_query(query)
    assert notices == [] and (state.output, state.seed, state.origin) == (-1, 12, True)
    assert {k: v for k, v in url_state.to_query(state).items() if k in query} == query
    state, notices = url_state.from_query(
        {"op": "grad_reverse", "in": "lam", "wrt": "x", "i.x": "0.5", "cmp_in": "x", "cmp_in_values": "0,1"}
    )
    assert notices == [] and (state.swept, state.wrt, dict(state.inputs)) == ("lam", "x", {"x": 0.5})
    assert state.compare_input_values == (0.0, 1.0)
    back = url_state.to_query(state)
    assert (back["in"], back["wrt"], back["i.x"], back["cmp_in_values"]) == ("lam", "x", "0.5", "0,1")
    state, notices = url_state.from_query({"op": "grad_reverse", "out": "x", "origin": "maybe", "i.lam": "5", "i.zz": "1"})
    assert len(notices) == 4 and state.output == 0 and not state.origin and dict(state.inputs) == {}
