"""The Explore page, run headless with streamlit.testing.v1.AppTest (no browser)."""

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import ops
from tests.shown import shown

APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 120


def _app(query: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    return app.run()


def _figure(app: AppTest, index: int = 0) -> dict:
    return json.loads(app.get("plotly_chart")[index].proto.spec)


def _trace(figure: dict, name: str) -> dict:
    return next(trace for trace in figure["data"] if trace.get("name") == name)


def _values(trace: dict, axis: str) -> np.ndarray:
    raw = trace[axis]
    if isinstance(raw, dict):  # plotly's typed-array encoding
        import base64

        return np.frombuffer(base64.b64decode(raw["bdata"]), dtype=np.dtype(raw["dtype"])).astype(float)
    return np.array([np.nan if v is None else v for v in raw], dtype=float)


@pytest.fixture(scope="module")
def default_app() -> AppTest:
    return _app()


def test_default_view_tells_the_ste_sign_story(default_app):
    app = default_app
    assert not app.exception
    assert app.title[0].value == "Straight-through sign"
    figure = _figure(app)
    titles = [a["text"] for a in figure["layout"]["annotations"] if a.get("text") in ("Forward", "True gradient (autodiff)", "Custom gradient")]
    assert titles == ["Forward", "True gradient (autodiff)", "Custom gradient"]
    custom = _trace(figure, "custom gradient")
    x, g = _values(custom, "x"), _values(custom, "y")
    inside = np.isfinite(g) & (np.abs(x) < 0.99)
    outside = np.isfinite(g) & (np.abs(x) > 1.01)
    assert np.all(g[inside] == 1.0) and np.all(g[outside] == 0.0)
    true = _trace(figure, "true gradient (autodiff)")
    assert np.nanmax(np.abs(_values(true, "y"))) == 0.0
    # the URL carries the state
    assert app.query_params["op"] == "ste_sign"


@pytest.mark.parametrize("key", ops.names())
def test_every_op_renders_at_default_parameters(key):
    app = _app({"op": key})
    assert not app.exception, [e.value for e in app.exception]
    assert not app.warning, [w.value for w in app.warning]  # no notice, no undeclared point
    assert app.title[0].value == ops.get(key).title
    assert len(app.get("plotly_chart")) >= 1


def test_changing_op_parameter_and_range_changes_the_figure():
    app = _app()
    before = _values(_trace(_figure(app), "custom gradient"), "y")
    app.slider(key="w.p.ste_sign.clip_value").set_value(0.5).run()
    after = _values(_trace(_figure(app), "custom gradient"), "y")
    assert not app.exception and not np.array_equal(before[np.isfinite(before)], after[np.isfinite(after)])
    assert app.query_params["p.clip_value"] == "0.5"

    app.selectbox(key="w.op").set_value("atan").run()
    figure = _figure(app)
    assert app.title[0].value == "Arctangent surrogate"
    custom_x, custom = _values(_trace(figure, "custom gradient"), "x"), _values(_trace(figure, "custom gradient"), "y")
    at_zero = custom[np.isclose(custom_x, 0.0)]
    assert np.allclose(at_zero, 1.0)  # alpha / 2 at the threshold

    app.number_input(key="w.lo").set_value(-1.0).run()
    app.number_input(key="w.hi").set_value(2.0).run()
    x = _values(_trace(_figure(app), "forward"), "x")
    assert np.nanmin(x) == pytest.approx(-1.0) and np.nanmax(x) == pytest.approx(2.0)
    assert app.query_params["lo"] == "-1" and app.query_params["hi"] == "2"


def test_url_restores_the_state():
    app = _app({"op": "rect", "p.alpha": "2", "p.threshold": "0.25", "lo": "-1", "hi": "1.5", "n": "501", "dtype": "float64"})
    assert not app.exception and not app.warning
    assert app.selectbox(key="w.op").value == "rect"
    assert app.slider(key="w.p.rect.alpha").value == 2.0
    assert app.slider(key="w.p.rect.threshold").value == 0.25
    assert app.radio(key="w.dtype").value == "float64"
    forward = _trace(_figure(app), "forward")
    x = _values(forward, "x")
    assert np.nanmin(x) == pytest.approx(-1.0) and np.nanmax(x) == pytest.approx(1.5)
    # rect's open box at threshold +- 0.5/alpha = 0 and 0.5 are in the special-points table
    table = app.dataframe[0].value
    assert sorted(table["x"].round(6)) == [0.0, 0.25, 0.5]


def test_a_copied_link_keeps_every_digit():
    """The page writes back the URL it was opened with, digit for digit (issue 31: it wrote 1.23457)."""
    link = {"op": "atan", "p.alpha": "1.23456789", "lo": "-2.123456789", "hi": "2.987654321"}
    app = _app(link)
    assert not app.exception and not app.warning
    assert {key: app.query_params[key] for key in link} == link


def test_bad_url_values_show_a_notice_and_no_exception():
    app = _app({"op": "nope", "n": "-5", "p.alpha": "nan", "lo": "3", "hi": "-3"})
    assert not app.exception
    text = " ".join(shown(w) for w in app.warning)
    assert "Unknown op 'nope'" in text and "'n'" in text and "lo < hi" in text
    assert app.title[0].value == "Straight-through sign"
    app.slider(key="w.p.ste_sign.clip_value").set_value(2.0).run()  # the next valid interaction works
    assert not app.exception


def test_invalid_sweep_shows_an_inline_message_and_keeps_the_page():
    app = _app()
    app.number_input(key="w.lo").set_value(5.0).run()  # lo above hi
    assert not app.exception
    assert any("lo" in e.value for e in app.error)
    assert app.sidebar.slider(key="w.p.ste_sign.clip_value").value == 1.0  # controls are kept
    app.number_input(key="w.lo").set_value(-3.0).run()
    assert not app.exception and not app.error and app.get("plotly_chart")


def test_reset_restores_defaults_of_the_current_op():
    app = _app({"op": "atan", "p.alpha": "5", "n": "501"})
    app.button[0].click().run()
    assert app.selectbox(key="w.op").value == "atan"
    assert app.slider(key="w.p.atan.alpha").value == 2.0 and app.number_input(key="w.n").value == 2001


def test_compare_section_overlays_one_curve_per_value(default_app):
    figure = _figure(default_app, 1)
    names = [t["name"] for t in figure["data"] if t.get("showlegend", True) and t.get("mode") == "lines"]
    assert {"clip_value = 0.5", "clip_value = 1", "clip_value = 2"} <= set(names)


def _leaves(value, path: str = "") -> dict:
    """Every leaf of a figure's JSON by its path; numeric arrays (lists or plotly's base64 typed arrays) as
    float64 arrays with NaN for null."""
    if isinstance(value, dict) and set(value) >= {"dtype", "bdata"}:
        return {path: _values({"v": value}, "v")}
    if isinstance(value, dict):
        return {leaf: item for key, sub in value.items() for leaf, item in _leaves(sub, f"{path}.{key}").items()}
    if isinstance(value, list) and value and all(v is None or isinstance(v, (int, float)) for v in value):
        return {path: _values({"v": value}, "v")}
    if isinstance(value, list):
        return {leaf: item for i, sub in enumerate(value) for leaf, item in _leaves(sub, f"{path}[{i}]").items()}
    return {path: value}


def _assert_sent_as_built(sent: dict, built: dict) -> None:
    """``sent`` (what the page sent) has every property of ``built`` (plotly's JSON of the figure explorer.explore.figures
    builds) with its value, arrays to the float32 the figure holds; the title is in bold, as Streamlit's theme
    sets it; the template is gone (its values are in the figure, see the next test) and a data revision is set."""
    built_layout = {k: v for k, v in built["layout"].items() if k != "template"}
    built_leaves = _leaves({"data": built["data"], "layout": built_layout})
    sent_leaves = _leaves(sent)
    assert "template" not in sent["layout"] and isinstance(sent["layout"]["datarevision"], str)
    for path, value in built_leaves.items():
        assert path in sent_leaves, path
        if path == ".layout.title.text":
            assert sent_leaves[path] == f"<b>{value}</b>"
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(sent_leaves[path].astype(np.float32), value.astype(np.float32), err_msg=path)
        else:
            assert sent_leaves[path] == value, path


def test_page_sends_the_figures_as_built_with_streamlits_theme_written_in(default_app):
    """The page hands st.plotly_chart ReadyFigures (prepared once, no validation, no copy, theme=None): what
    reaches the browser is the figure explorer.explore.figures builds, property for property, plus the values its
    template and Streamlit's theme give what the figure leaves open (hand-picked from plotly_white and
    Streamlit 1.67's theme; tests/e2e/test_figure_theme.py checks the whole resolved figure in Chromium)."""
    import plotly.io

    from explorer.explore import figures
    from explorer.explore.points import special_points
    from explorer.explore.sweeps import sweep
    from explorer.ui.widgets import ReadyFigure

    result = sweep("ste_sign")
    built = json.loads(plotly.io.to_json(figures.main_figure(result, special_points(result))))
    sent = _figure(default_app)
    _assert_sent_as_built(sent, built)
    assert default_app.get("plotly_chart")[0].proto.theme == ""  # theme=None: the figure carries it
    layout = sent["layout"]
    assert layout["xaxis3"]["zerolinecolor"] == "#D0D0D0"  # the figure's own value wins over the theme's
    assert layout["xaxis3"]["zerolinewidth"] == 2  # plotly_white, which the figure leaves open
    assert layout["yaxis2"]["gridcolor"] == "#e6eaf1"  # Streamlit's theme over plotly_white's #EBF0F8
    assert layout["xaxis2"]["showgrid"] is False and layout["paper_bgcolor"] == "#ffffff"
    assert layout["hoverlabel"]["font"]["family"] == '"Source Sans", sans-serif, "Source Sans", sans-serif'  # theme
    assert layout["hoverlabel"]["font"]["size"] == 12 and layout["legend"]["font"]["color"] == "#262730"
    assert all(a["arrowcolor"] == "#2a3f5f" for a in layout["annotations"])  # plotly_white's annotationdefaults
    assert all(t["fillpattern"] == {"fillmode": "overlay", "size": 10, "solidity": 0.2} for t in sent["data"])
    ready = ReadyFigure(figures.main_figure_spec(result, special_points(result)))
    assert json.loads(plotly.io.to_json(ready.to_dict(), validate=False)) == sent
    assert json.loads(plotly.io.to_json(ready.to_dict(), validate=False)) == sent  # sending twice changes nothing
    sweeps = [sweep("ste_sign", params={"clip_value": c}) for c in (0.5, 1.0, 2.0)]
    labels = ["clip_value = 0.5", "clip_value = 1", "clip_value = 2"]
    compare = figures.compare_figure(sweeps, labels, [special_points(s) for s in sweeps])
    _assert_sent_as_built(_figure(default_app, 1), json.loads(plotly.io.to_json(compare)))


def test_a_figure_s_data_revision_changes_exactly_when_its_arrays_do():
    """layout.datarevision tells plotly.react whether the data changed (arrays and array-valued attributes are
    not compared): the same arrays and lists give the same revision; one changed value, the same values in
    another dtype, or a changed text list or object array, a new one. The layout does not count (plotly
    compares it)."""
    from explorer.ui.widgets import ReadyFigure

    def revision(y: np.ndarray, text: list | None = None, custom=None, y_range=(0.0, 3.0)) -> str:
        line = {"type": "scatter", "mode": "lines", "x": np.arange(float(y.size)), "y": y, "name": "a"}
        line |= {"text": text or ["p", "q", "r", "s"], "customdata": np.array(custom or ["u", "v", "w", "z"], dtype=object)}
        spec = {"data": [line], "layout": {"title": {"text": "t"}, "yaxis": {"range": list(y_range)}}}
        return ReadyFigure(spec).to_dict()["layout"]["datarevision"]

    y = np.array([0.0, 1.0, np.nan, 2.0])
    assert revision(y) == revision(y.copy()) == revision(y, y_range=(0.0, 4.0))
    assert revision(y) != revision(np.array([0.0, 1.0, 3.0, 2.0]))
    assert revision(y) != revision(y.astype(np.float32))
    assert revision(y) != revision(y, text=["p", "q", "r", "S"])
    assert revision(y) != revision(y, custom=["u", "v", "w", "Z"])


def test_streamlit_still_has_the_flag_the_app_sets_to_skip_its_direct_execution_check():
    """explorer.ui.runtime.skip_direct_execution_warning sets a private Streamlit flag (it spares the first
    run ~0.3 s of inspect.stack()); if Streamlit renames it the app is slower, not broken: this says so."""
    from streamlit import delta_generator

    from explorer.ui import runtime

    assert hasattr(delta_generator, "_use_warning_has_been_displayed")
    runtime.skip_direct_execution_warning()
    assert delta_generator._use_warning_has_been_displayed is True


def test_page_sends_each_table_as_st_dataframe_sends_the_pandas_frame_without_its_index(default_app):
    """The cached tables go to st.dataframe already as Arrow (explorer.ui.widgets.arrow_table): the table
    that reaches the browser has the columns, types and values Streamlit makes of the pandas frame
    itself; only the index (hidden on the page) and pandas' metadata are left out."""
    import pyarrow as pa
    from streamlit import dataframe_util

    from explorer.explore.measures import metrics_table
    from explorer.explore.points import display_table, special_points
    from explorer.explore.sweeps import sweep

    result = sweep("ste_sign")
    sweeps = [sweep("ste_sign", params={"clip_value": c}) for c in (0.5, 1.0, 2.0)]
    frames = [
        display_table(special_points(result)),
        metrics_table([result], ["ste_sign"]),
        metrics_table(sweeps, ["clip_value = 0.5", "clip_value = 1", "clip_value = 2"]),
    ]
    elements = default_app.dataframe
    assert len(elements) == len(frames)
    for element, frame in zip(elements, frames, strict=True):
        sent = pa.ipc.open_stream(element.proto.arrow_data.data).read_all()
        expected = dataframe_util.convert_pandas_df_to_arrow_table(frame.reset_index(drop=True))
        assert sent.schema.names == expected.schema.names
        assert sent.schema.remove_metadata() == expected.schema.remove_metadata()
        assert sent.to_pylist() == expected.to_pylist()
        assert sent.num_rows == len(frame) > 0


def test_the_app_freezes_the_objects_alive_after_its_imports_once(default_app):
    """explorer.ui.runtime.startup_imports: a full garbage collection skips the startup objects."""
    import gc

    from explorer.ui import runtime

    assert runtime._STARTED and gc.get_freeze_count() > 0
    assert gc.isenabled()  # paused only while the app imported (tests/test_startup.py)
    before = gc.get_freeze_count()
    with runtime.startup_imports():  # once per process: a later run freezes nothing more
        pass
    assert gc.get_freeze_count() == before


def test_arrow_table_types_each_column_as_streamlit_converts_a_pandas_column():
    """Strings (a list, or a NumPy object array) as large_string like pandas' str columns, NumPy arrays in
    their own dtype, Python floats and bools as double and bool; values unchanged, NaN included."""
    import numpy as np
    import pyarrow as pa

    from explorer.ui.widgets import arrow_table

    table = arrow_table(
        {
            "kind": ["jump", "kink"],
            "status": np.array(["ok", "undeclared"], dtype=object),
            "at": np.array([0.5, -1.25], dtype=np.float32),
            "peak": [1.0, float("nan")],
            "normalised": [True, False],
        }
    )
    assert table.schema.types == [pa.large_string(), pa.large_string(), pa.float32(), pa.float64(), pa.bool_()]
    rows = table.to_pylist()
    assert [row["kind"] for row in rows] == ["jump", "kink"]
    assert [row["status"] for row in rows] == ["ok", "undeclared"]
    assert [row["at"] for row in rows] == [0.5, -1.25]
    assert rows[0]["peak"] == 1.0 and np.isnan(rows[1]["peak"])
    assert [row["normalised"] for row in rows] == [True, False]
