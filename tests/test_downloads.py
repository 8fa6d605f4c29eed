"""Figures for a paper and a view for a teammate (issue 40, item 3): every chart's camera button saves an SVG and
the notebook's ``plot(..., save=...)`` (writing with kaleido in Chromium: tests/e2e/test_downloads_browser.py)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import explorer
from explorer import state as url_state

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 120


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


def test_explore_charts_save_svgs_named_for_the_op():
    app = AppTest.from_file(APP, default_timeout=TIMEOUT)
    app.query_params.update({"op": "ste_sign", "p.clip_value": "0.5"})
    app.run()
    assert not app.exception
    buttons = _svg_buttons(app)
    assert len(buttons) == 2 and all(options["format"] == "svg" for options in buttons.values())
    assert sorted(options["filename"] for options in buttons.values()) == ["ste_sign", "ste_sign_compare"]


def train_app():
    import streamlit as st  # noqa: F401

    from explorer.ui import runtime, train

    runtime.keep_keras_state_between_reruns()
    train.page()


def test_train_charts_save_svgs():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.epochs").set_value(3).run()
    app.button[0].click().run()  # Start
    for _ in range(40):  # AppTest does not tick the live fragment on its own
        if not app.session_state["train.running"]:
            break
        app.run()
    assert not app.exception
    buttons = _svg_buttons(app)
    assert len(buttons) == 3 and all(options["format"] == "svg" for options in buttons.values())
    assert sorted(options["filename"] for options in buttons.values()) == ["train_layer_chart", "train_loss_chart", "train_predictions"]


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
