"""The Explore page in a real browser: first load, op and slider changes, URL state, CSV download."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

import ops
from explorer import state as url_state

pytestmark = pytest.mark.e2e

PANEL_TITLES = ["Forward", "True gradient (autodiff)", "Custom gradient"]
CSV_COLUMNS = ["x", "forward", "true_grad", "custom_grad", "true_grad_missing", "point"]


def _slider_ops() -> list[ops.OpSpec]:
    """Ops (other than the default) whose first parameter is drawn as a float slider."""
    return [
        spec
        for spec in map(ops.get, ops.names())
        if spec.key != url_state.DEFAULT_OP
        and spec.params
        and not spec.params[0].integer
        and not (spec.params[0].low > 0 and spec.params[0].high / spec.params[0].low > 1e4)
    ]


def _assert_custom_gradient_drawn(app, spec: ops.OpSpec, params: dict[str, float]) -> None:
    """The drawn custom-gradient curve is the op's custom gradient at the drawn x, for ``params``."""
    x, y = (np.asarray(values, dtype=float) for values in app.trace("custom gradient"))
    finite = np.isfinite(x) & np.isfinite(y)
    assert finite.sum() > 100
    expected = np.asarray(spec.surrogate_grad(x[finite].astype(np.float32), **params), dtype=float)
    np.testing.assert_allclose(y[finite], expected, rtol=1e-4, atol=1e-5)


def test_first_page_loads_with_three_panels(app):
    app.open()
    figure = app.wait_figure()
    app.screenshot("01_first_load")
    assert app.exceptions() == []
    assert figure["titles"][:3] == PANEL_TITLES
    assert app.page.locator(".st-key-main_figure .js-plotly-plot").is_visible()
    assert app.title() == ops.get(url_state.DEFAULT_OP).title
    names = {trace["name"] for trace in figure["traces"]}
    assert {"forward", "true gradient (autodiff)", "custom gradient"} <= names
    assert app.query()["op"] == [url_state.DEFAULT_OP]


def test_other_op_then_slider_changes_the_figure(app):
    spec = _slider_ops()[0]
    param = spec.params[0]
    app.open()
    before = app.wait_figure()

    app.pick_op(spec.key)
    after_op = app.wait_figure_change(before)
    assert app.title() == spec.title
    assert app.query()["op"] == [spec.key]
    _assert_custom_gradient_drawn(app, spec, spec.defaults())

    # One key press, one rerun: after three, the first rerun's figure could count as "changed and settled"
    # while the thumb already showed the third value (2.02 in the URL, 2.06 on the thumb, on a busy machine).
    app.nudge_slider(param.name)
    after_slider = app.wait_figure_change(after_op)
    app.screenshot("02_op_and_slider")
    assert app.exceptions() == []
    shown = float(app.sidebar_slider(param.name).get_by_test_id("stSliderThumbValue").inner_text())
    assert shown > param.default
    assert float(app.query()[f"p.{param.name}"][0]) == pytest.approx(shown)
    custom = lambda fig: next(t for t in fig["traces"] if t["name"] == "custom gradient")  # noqa: E731
    assert custom(after_slider)["ysum"] != custom(after_op)["ysum"]
    _assert_custom_gradient_drawn(app, spec, {**spec.defaults(), param.name: shown})


def test_url_query_sets_op_parameters_and_range(app):
    spec = _slider_ops()[-1]
    param = spec.params[0]
    value = round(param.low + 0.3 * (param.high - param.low), 2)
    lo, hi, n = -1.5, 2.5, 801
    app.open(query={"op": spec.key, f"p.{param.name}": value, "lo": lo, "hi": hi, "n": n})
    app.wait_figure()
    app.screenshot("03_url_state")
    assert app.exceptions() == []
    assert app.warnings() == []
    assert app.title() == spec.title
    sidebar = app.page.get_by_test_id("stSidebar")
    assert f"({spec.key})" in sidebar.get_by_test_id("stSelectbox").first.locator("input").input_value()
    shown = app.sidebar_slider(param.name).get_by_test_id("stSliderThumbValue").inner_text()
    assert float(shown) == pytest.approx(value)
    assert float(sidebar.get_by_role("spinbutton", name="x from", exact=True).input_value()) == lo
    assert float(sidebar.get_by_role("spinbutton", name="x to", exact=True).input_value()) == hi
    assert int(sidebar.get_by_role("spinbutton", name="points", exact=True).input_value()) == n
    x, _ = app.trace("forward")
    x = np.asarray(x, dtype=float)
    assert np.nanmin(x) == pytest.approx(lo) and np.nanmax(x) == pytest.approx(hi)
    _assert_custom_gradient_drawn(app, spec, {**spec.defaults(), param.name: value})


def test_csv_download_has_the_sweep(app):
    spec = _slider_ops()[0]
    lo, hi, n = -2.0, 2.0, 501
    app.open(query={"op": spec.key, "lo": lo, "hi": hi, "n": n})
    app.wait_figure()
    button = app.page.get_by_role("button", name="Sweep as CSV")
    assert f"({n} rows)" in button.inner_text()
    with app.page.expect_download() as download_info:
        button.click()
    download = download_info.value
    assert download.suggested_filename == f"{spec.key}_sweep.csv"
    table = pd.read_csv(io.StringIO(open(download.path()).read()))
    app.screenshot("06_csv_download")
    assert list(table.columns) == CSV_COLUMNS
    assert len(table) == n
    np.testing.assert_allclose(table["x"], np.linspace(lo, hi, n), atol=1e-6)
    expected = spec.surrogate_grad(table["x"].to_numpy(np.float32), **spec.defaults())
    np.testing.assert_allclose(table["custom_grad"], np.asarray(expected, dtype=float), rtol=1e-4, atol=1e-6)
