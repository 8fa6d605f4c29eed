"""The Editor page, run headless with streamlit.testing.v1.AppTest."""

import pytest
from streamlit.testing.v1 import AppTest

from explorer import expr
from explorer.checker import plan
from explorer.state import EDITOR_URL_KEYS
from tests.shown import shown

TIMEOUT = 90


def editor_app():
    from explorer.ui import editor

    editor.page()


def run_page(query=None):
    app = AppTest.from_function(editor_app, default_timeout=TIMEOUT)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def figures_on(app):
    return app.get("plotly_chart")


ALERT_LEVELS = {"success": "pass", "info": "skip", "warning": "warn", "error": "fail"}


def checker_rows(app) -> list[tuple[str, str]]:
    """(check, level) of each checker line, in the page's order (the tree walked top to bottom), the level read
    from the kind of box it is drawn in."""
    rows = []
    for node in app.main:
        if node.type in ALERT_LEVELS and str(node.value).startswith("**"):
            rows.append((node.value.split("**")[1], ALERT_LEVELS[node.type]))
    return rows


@pytest.fixture(scope="module")
def default_app():
    return run_page()


def test_default_example_renders(default_app):
    app = default_app
    assert app.title[0].value.startswith("Editor")
    assert app.text_area(key="editor.forward").value == "where(x > 0, 1, 0)"
    assert app.text_area(key="editor.gradient").value == "1 / (k * abs(x) + 1) ** 2"
    assert len(figures_on(app)) == 1
    assert len(app.get("download_button")) == 2
    assert app.slider[0].label == "k" and app.slider[0].value == 25.0
    assert len(app.latex) == 2
    # in the checker's order, each in the box of its level: the spike surrogate differs from autodiff of the step
    # (0) and an editor op's description is no justification, so vs_autodiff warns; everything else passes
    expected = [(name, "warn" if name == "vs_autodiff" else "pass") for name in plan.FUNCTION_CHECKS]
    assert checker_rows(app) == expected
    assert not app.error  # the example compiles and passes every check (warnings allowed)


def test_language_help_lists_every_function_of_the_table(default_app):
    tables = [frame.value for frame in default_app.dataframe if "function" in frame.value.columns]
    assert len(tables) == 1
    shown_functions = list(tables[0]["function"])
    assert shown_functions == [function.signature for function in expr.FUNCTIONS.values()]
    assert all(tables[0]["meaning"])


def test_default_example_is_written_to_the_url(default_app):
    query = {key: default_app.query_params[key] for key in EDITOR_URL_KEYS}
    assert query == {
        "u_name": "my_spike",
        "u_fwd": "where(x > 0, 1, 0)",
        "u_grad": "1 / (k * abs(x) + 1) ** 2",
        "u_params": "k:25:1:100",
        "u_points": "0",
    }


def test_hostile_expression_shows_the_parser_message_and_keeps_the_figure():
    app = run_page()
    app.text_area(key="editor.forward").set_value("__import__('os')")
    app.button[0].click()
    app.run()
    assert not app.exception
    errors = [shown(e) for e in app.error]
    assert any(
        "calling '__import__' is not allowed" in text and "forward" in text and "column 1" in text for text in errors
    )
    assert len(figures_on(app)) == 1  # the last good op is still plotted
    assert app.slider[0].label == "k"
    assert app.query_params["u_fwd"] == "where(x > 0, 1, 0)"  # the URL keeps the last good op


def test_new_op_from_the_form_replaces_the_figure_and_the_url():
    app = run_page()
    app.text_input(key="editor.name").set_value("reversal")
    app.text_area(key="editor.forward").set_value("x")
    app.text_area(key="editor.gradient").set_value("-lam")
    app.text_input(key="editor.p0.name").set_value("lam")
    app.number_input(key="editor.p0.default").set_value(1.0)
    app.number_input(key="editor.p0.low").set_value(0.0)
    app.number_input(key="editor.p0.high").set_value(5.0)
    app.text_input(key="editor.points").set_value("")
    app.button[0].click()
    app.run()
    assert not app.exception and not [e for e in app.error if not e.value.startswith("**")]
    assert app.subheader[0].value == "reversal"
    assert app.slider[0].label == "lam"
    assert app.query_params["u_grad"] == "-lam"
    assert app.query_params["u_params"] == "lam:1:0:5"


def test_op_is_read_from_the_url():
    app = run_page(
        {"u_name": "scaled", "u_fwd": "x ** 2", "u_grad": "s * 2 * x", "u_params": "s:0.5:0:2", "u_points": ""}
    )
    assert app.text_area(key="editor.gradient").value == "s * 2 * x"
    assert app.subheader[0].value == "scaled"
    assert app.slider[0].label == "s" and app.slider[0].value == 0.5
    assert not app.warning or all("URL" not in shown(w) for w in app.warning)


def test_bad_url_values_give_notices_not_exceptions():
    app = run_page({"u_fwd": "log(", "u_params": "k:25:one:100"})
    warnings = " ".join(shown(w) for w in app.warning)
    assert "u_params was ignored" in warnings
    assert "did not compile" in warnings
    assert any("syntax error" in shown(e) for e in app.error)
    assert app.subheader[0].value == "my_spike"  # the example is shown instead
    assert len(figures_on(app)) == 1
