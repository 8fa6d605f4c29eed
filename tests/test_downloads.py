"""Figures for a paper and a view for a teammate (issue 40, item 3): every chart's camera button saves an SVG, the
notebook's ``plot(..., save=...)`` and the offline HTML view of the Explore and Train pages (built without Streamlit
by :func:`explorer.explore.view_html.view_html`, read back here with the standard library's parsers)."""

from __future__ import annotations

import ast
import html
import json
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import explorer
import ops
from explorer import state as url_state
from explorer.checker.common import Check
from explorer.explore import figures, view_html
from explorer.explore.points import display_table, special_points
from tests.view_file import read_view, recording_downloads, values

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 120
CHECKS = (
    Check("finite", True, "finite everywhere", "pass"),
    Check("special_points", True, "does not apply: not one input, elementwise", "skip"),
    Check("vs_autodiff", True, "differs <b>on purpose</b>", "warn"),
    Check("shape_dtype", False, "gradient has shape (4, 3), expected ()", "fail"),
)


@pytest.fixture(scope="module")
def atan_view():
    """atan's sweep, special points and main figure spec (the page's figure), and a compare spec."""
    result = explorer.sweep("atan", lo=-2, hi=2, n=801, params={"alpha": 3.0})
    points = special_points(result)
    spec = figures.main_figure_spec(result, points)
    other = explorer.sweep("sigmoid", lo=-2, hi=2, n=801)
    compare = figures.compare_figure_spec([result, other], ["atan", "sigmoid"], [points, special_points(other)])
    return result, points, spec, compare


def _page(atan_view, **overrides) -> str:
    result, points, spec, compare = atan_view
    arguments = {
        "title": "Arctangent surrogate (atan) · Gradient Explorer",
        "link": "http://127.0.0.1:8501?op=atan&p.alpha=3&lo=-2&hi=2&n=801&cmp=ops&cmp_ops=atan,sigmoid",
        "charts": [view_html.Chart("Forward, true and custom gradient", spec, "atan"), view_html.Chart("Compare", compare, "atan_compare")],
        "tables": [view_html.Table("Special points", display_table(points))],
        "verdict": view_html.Verdict(CHECKS, "The gradient checker on atan."),
        "subtitle": "alpha = 3",
        "saved_at": "2026-12-05 10:00 UTC",
    }
    return view_html.view_html(**{**arguments, **overrides})


# -- the builder -------------------------------------------------------------------------------------------
def test_the_view_holds_its_figures_link_verdict_and_tables(atan_view):
    result, points, spec, compare = atan_view
    page = _page(atan_view)
    view = read_view(page)

    # offline: no script is loaded from anywhere, and plotly.js is in the file once for both figures
    assert all("src" not in script["attrs"] for script in view.scripts)
    assert "<script src=" not in page and 'src="http' not in page
    assert page.count("* plotly.js v") == 1 and len(page) > 3_000_000

    # the figures: the traces of each spec, in order, with their values, and an SVG camera button each
    assert [figure["id"] for figure in view.figures] == ["figure-0", "figure-1"]
    for drawn, source in zip(view.figures, (spec, compare), strict=True):
        assert [trace.get("name") for trace in drawn["data"]] == [trace.get("name") for trace in source["data"]]
    custom = next(trace for trace in view.figures[0]["data"] if trace.get("name") == "custom gradient")
    x, y = values(custom, "x"), values(custom, "y")
    finite = np.isfinite(x) & np.isfinite(y)
    assert finite.sum() > 700
    np.testing.assert_allclose(y[finite], 3.0 / (1.0 + (np.pi * 3.0 / 2 * x[finite]) ** 2) / 2, rtol=1e-5, atol=1e-6)
    assert [figure["config"]["toImageButtonOptions"] for figure in view.figures] == [
        {"format": "svg", "filename": "atan"}, {"format": "svg", "filename": "atan_compare"},
    ]  # fmt: skip

    # the link that reproduces the view, followable, and the state it gives
    link = "http://127.0.0.1:8501?op=atan&p.alpha=3&lo=-2&hi=2&n=801&cmp=ops&cmp_ops=atan,sigmoid"
    assert view.links == [link] and view.link_text == link
    state, notices = url_state.from_query(parse_qs(urlsplit(view.links[0]).query))
    assert notices == [] and (state.op, state.params["alpha"], state.lo, state.hi, state.n) == ("atan", 3.0, -2.0, 2.0, 801)

    # the verdict: every check, failures first, the message escaped as text
    assert view.check_rows == [
        ("fail", "shape_dtype", "gradient has shape (4, 3), expected ()"),
        ("warn", "vs_autodiff", "differs <b>on purpose</b>"),
        ("skip", "special_points", "does not apply: not one input, elementwise"),
        ("pass", "finite", "finite everywhere"),
    ]
    assert "4 checks: 1 pass, 1 warn, 1 fail, 1 skip" in page and "<b>on purpose</b>" not in page

    # the special-points table: the declared jump at the threshold, as the page's table shows it
    rows = view.tables["Special points"]
    shown = display_table(points)
    assert rows[0] == list(shown.columns)
    assert len(rows) == len(shown) + 1 and float(rows[1][0]) == pytest.approx(0.0)
    assert [point.x for point in ops.get("atan").points(-2, 2, alpha=3.0)] == [0.0]
    assert view.headings == [
        "Arctangent surrogate (atan) · Gradient Explorer", "Reproduce this view", "Forward, true and custom gradient",
        "Compare", "Checks", "Special points",
    ]  # fmt: skip


def test_every_text_is_escaped_and_a_trace_name_cannot_end_the_script(atan_view):
    _, points, spec, _ = atan_view
    hostile = "</script><script>alert(1)</script>"
    named = {**spec, "data": [{**spec["data"][0], "name": hostile}, *spec["data"][1:]]}
    table = pd.DataFrame({"note": [hostile], "x": [0.5]})
    page = _page(
        atan_view, title=f"<i>{hostile}</i>", subtitle=hostile, charts=[view_html.Chart(hostile, named, "x", hostile)],
        tables=[view_html.Table(hostile, table, hostile)], verdict=view_html.Verdict((Check(hostile, True, hostile, "pass"),), hostile),
    )  # fmt: skip
    assert "<script>alert" not in page and "<i>" not in page
    view = read_view(page)
    assert all("alert" not in script["text"] or "\\u003c" in script["text"] for script in view.scripts)
    assert view.figures[0]["data"][0]["name"] == hostile  # the name itself is intact
    assert view.tables[hostile][1] == [hostile, "0.5"]
    assert view.check_rows == [("pass", hostile, hostile)]
    assert html.escape(hostile) in page


def test_a_link_that_is_not_http_is_shown_as_text_not_followed(atan_view):
    for link in ("javascript:alert(1)", "?op=atan"):
        view = read_view(_page(atan_view, link=link))
        assert view.links == [] and view.link_text == link


def test_a_view_without_a_verdict_or_with_only_a_note(atan_view):
    assert "Checks" not in read_view(_page(atan_view, verdict=None)).headings
    noted = read_view(_page(atan_view, verdict=view_html.Verdict(note="The checks had not finished.")))
    assert "Checks" in noted.headings and noted.check_rows == []
    with pytest.raises(ValueError, match="at least one chart"):
        _page(atan_view, charts=[])
    with pytest.raises(ValueError, match="plotly Figure or"):
        _page(atan_view, charts=[view_html.Chart("bad", "<div>")])


def test_the_notebook_report_is_the_same_verdict_table():
    from explorer.notebook import CheckReport

    report = CheckReport("mine", CHECKS)
    assert report._repr_html_() == view_html.checks_html(CHECKS, report.summary())
    assert view_html.checks_summary(CHECKS) == "4 checks: 1 pass, 1 warn, 1 fail, 1 skip"


# -- the notebook's plot(..., save=...) without kaleido (writing with it: tests/e2e/test_downloads_browser.py) -----
def test_saving_without_kaleido_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "kaleido", None)  # import kaleido raises ImportError
    target = tmp_path / "atan.svg"
    with pytest.raises(ImportError, match=r"pip install 'gradient-explorer\[images\]'"):
        explorer.plot("atan", n=201, save=target)
    assert not target.exists()
    assert explorer.plot("atan", n=201).data  # without save= nothing is needed


def test_saving_to_an_unknown_format_names_the_allowed_ones(tmp_path):
    with pytest.raises(ValueError, match=r"allowed: \.svg, \.png, \.pdf"):
        explorer.plot("atan", n=201, save=tmp_path / "atan.jpg")


# -- the pages ---------------------------------------------------------------------------------------------
def test_no_page_draws_a_chart_but_through_the_widgets_that_set_the_svg_button():
    """Every chart of the pages goes through explorer.ui.widgets.show_figure / show_chart (their config sets the
    camera button to SVG): no page module calls st.plotly_chart itself."""
    offenders = []
    for path in sorted((ROOT / "explorer" / "ui").glob("*.py")):
        if path.name == "widgets.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "plotly_chart":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def _svg_buttons(app: AppTest) -> dict[str, dict]:
    """Each drawn chart's camera-button options, by its element id's key part."""
    return {chart.proto.id: json.loads(chart.proto.config)["toImageButtonOptions"] for chart in app.get("plotly_chart")}


def test_explore_downloads_this_view_with_its_figures_link_checks_and_points(monkeypatch):
    download_data = recording_downloads(monkeypatch)
    app = AppTest.from_file(APP, default_timeout=TIMEOUT)
    app.query_params.update({"op": "ste_sign", "p.clip_value": "0.5", "lo": "-2", "hi": "2", "n": "801"})
    app.run()
    assert not app.exception
    buttons = _svg_buttons(app)
    assert len(buttons) == 2 and all(options["format"] == "svg" for options in buttons.values())
    assert sorted(options["filename"] for options in buttons.values()) == ["ste_sign", "ste_sign_compare"]
    labels = [button.proto.label for button in app.get("download_button")]
    assert labels == ["Sweep as CSV (801 rows)", "Download this view (HTML)"]

    build = download_data["ste_sign_view.html"]
    assert callable(build)  # made on the click, not on every rerun
    view = read_view(build())

    # the link: the page's own query on the server's address (AppTest has no browser: localhost and its port)
    link = urlsplit(view.links[0])
    assert (link.scheme, link.netloc) == ("http", "localhost:8501")
    page_query = {key: value if isinstance(value, str) else value[-1] for key, value in app.query_params.items()}
    assert {key: given[-1] for key, given in parse_qs(link.query).items()} == page_query
    # the figures: the page's main and compare figures, trace for trace
    sent = [json.loads(chart.proto.spec) for chart in app.get("plotly_chart")]
    assert [[t.get("name") for t in figure["data"]] for figure in view.figures] == [[t.get("name") for t in figure["data"]] for figure in sent]
    custom = next(t for t in view.figures[0]["data"] if t.get("name") == "custom gradient")
    x, y = values(custom, "x"), values(custom, "y")
    finite = np.isfinite(y)
    np.testing.assert_array_equal(y[finite], np.where(np.abs(x[finite]) <= 0.5, 1.0, 0.0))  # the clip window, boundaries included
    # the verdict is the checker's, row for row
    from explorer.checker import runner

    expected = sorted(runner.check("ste_sign", clip_value=0.5), key=lambda c: view_html.LEVEL_ORDER[c.level])
    assert [(level, name) for level, name, _ in view.check_rows] == [(c.level, c.name) for c in expected]
    # the special points: the clipping boundaries at +-0.5, the sign's jump at 0
    points = view.tables["Special points"]
    assert sorted(float(row[0]) for row in points[1:]) == [-0.5, 0.0, 0.5]
    assert [row[0] for row in view.tables["Metrics"][1:]] == ["ste_sign"]


def test_a_loaded_op_view_says_when_its_checks_did_not_finish(monkeypatch):
    """The verdict of a view waits at most VIEW_CHECKS_SECONDS for a loaded op's background checks; then the file
    says so instead of failing the download."""
    import concurrent.futures

    from explorer import loaded
    from explorer.ui import explore

    never: concurrent.futures.Future = concurrent.futures.Future()
    monkeypatch.setattr(loaded, "is_loaded", lambda key: True)
    monkeypatch.setattr(loaded, "checks", lambda key, params: never)
    monkeypatch.setattr(explore, "VIEW_CHECKS_SECONDS", 0.05)
    verdict = explore._verdict("mine", {"k": 2.0})
    assert verdict.checks == () and verdict.note == "The checks of mine at k = 2 had not finished 0.05 s after the click."
    failed: concurrent.futures.Future = concurrent.futures.Future()
    failed.set_exception(RuntimeError("the worker went away"))
    monkeypatch.setattr(loaded, "checks", lambda key, params: failed)
    assert explore._verdict("mine", {}).note == "The checks of mine could not run: RuntimeError: the worker went away"


def train_app():
    import streamlit as st  # noqa: F401

    from explorer.ui import runtime, train

    runtime.keep_keras_state_between_reruns()
    train.page()


def test_train_downloads_this_view_with_its_runs_results_and_settings(monkeypatch):
    """A training from a link (one run learning atan's parameters): the view holds the loss, learned-parameter,
    gradient-flow and prediction figures as the page draws them, the results, the settings and the link."""
    download_data = recording_downloads(monkeypatch)
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    app.query_params.update({"runs": "ste_sign:custom;ste_sign:true;atan:custom::learn", "epochs": "3"})
    app.run()
    app.button[0].click().run()  # Start
    for _ in range(40):  # AppTest does not tick the live fragment on its own
        if not app.session_state["train.running"]:
            break
        app.run()
    assert not app.exception
    buttons = _svg_buttons(app)
    assert all(options["format"] == "svg" for options in buttons.values())
    assert sorted(options["filename"] for options in buttons.values()) == [
        "train_layer_chart", "train_learned_chart", "train_loss_chart", "train_predictions",
    ]  # fmt: skip

    view = read_view(download_data["training_xor_view.html"]())
    labels = ["ste_sign (custom)", "ste_sign (true)", "atan (custom, learnt)"]
    # the link: the trained state (with the epochs trained) on the server's address, the Train page's own URL form
    link = urlsplit(view.links[0])
    assert (link.scheme, link.netloc, link.path) == ("http", "localhost:8501", "/train")
    session = app.session_state["train.session"]
    restored, notices = url_state.train_from_query(parse_qs(link.query), url_state.TrainState())
    assert notices == [] and restored == session.state.replace(epochs=3)
    # the figures, as the page sent them: loss, learned parameters, gradient flow, predictions
    sent = {chart.proto.id: json.loads(chart.proto.spec) for chart in app.get("plotly_chart")}
    by_key = {key: next(spec for element_id, spec in sent.items() if key in element_id) for key in
              ("train.loss_chart", "train.learned_chart", "train.layer_chart", "train.predictions")}  # fmt: skip
    assert [[t.get("name") for t in figure["data"]] for figure in view.figures] == [
        [t.get("name") for t in figure["data"]] for figure in by_key.values()
    ]
    assert [t["name"] for t in view.figures[0]["data"]] == labels
    for trace, result in zip(view.figures[0]["data"], session.snapshot()[1], strict=True):
        np.testing.assert_allclose(values(trace, "y"), result.history["loss"].to_numpy(), rtol=1e-6)
    assert view.headings[2:7] == ["Loss", "Learned parameters", "Gradient flow through depth", "Decision boundaries", "Results"]
    results = view.tables["Results"]
    assert [row[0] for row in results[1:]] == labels and results[0][:2] == ["run", "status"]
    settings = dict(view.tables["Settings"][1:])
    assert settings["epochs trained"] == "3" and settings["seed"] == "0" and settings["batch size"] == "full batch"


def test_a_preset_chart_has_the_svg_button_too():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    app.query_params["preset"] = "yin2019"
    app.run()
    assert not app.exception
    buttons = _svg_buttons(app)
    assert len(buttons) == 2 and {options["format"] for options in buttons.values()} == {"svg"}


def test_the_editor_chart_has_the_svg_button_named_for_the_op():
    from tests.test_editor import editor_app

    app = AppTest.from_function(editor_app, default_timeout=TIMEOUT).run()
    assert not app.exception
    (options,) = _svg_buttons(app).values()
    assert options == {"format": "svg", "filename": url_state.DEFAULT.name}
