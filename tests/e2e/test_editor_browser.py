"""The Editor page in a real browser: a valid user op plots; an injection attempt changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from explorer import expr

pytestmark = pytest.mark.e2e

FIGURE_KEY = "editor.figure"
GRADIENT_LABEL = "Custom gradient g(x) (backward = dy * g(x))"


def _submit_gradient(app, text: str) -> None:
    area = app.page.get_by_role("textbox", name=GRADIENT_LABEL)
    area.fill(text)
    app.page.get_by_role("button", name="Plot", exact=True).click()


def test_valid_user_op_plots_and_injection_is_refused(app, tmp_path):
    app.open("editor")
    before = app.wait_figure(FIGURE_KEY)
    assert app.exceptions() == []
    assert before["titles"][:3] == ["Forward", "True gradient (autodiff)", "Custom gradient"]

    # a valid op: the drawn custom gradient is exp(-k|x|) with the example's k = 25
    _submit_gradient(app, "exp(-k * abs(x))")
    plotted = app.wait_figure_change(before, FIGURE_KEY)
    app.screenshot("05a_editor_valid_op")
    assert app.exceptions() == [] and app.errors() == []
    x, y = (np.asarray(v, dtype=float) for v in app.trace("custom gradient", FIGURE_KEY))
    finite = np.isfinite(x) & np.isfinite(y)
    np.testing.assert_allclose(y[finite], np.exp(-25.0 * np.abs(x[finite])), rtol=1e-5, atol=1e-6)
    assert app.query()["u_grad"] == ["exp(-k * abs(x))"]
    url_before = app.page.url

    # an injection attempt: the parser's message, and nothing else changes (no file is written either)
    marker = tmp_path / "injected"
    attack = f"__import__('os').system('touch {marker}')"
    with pytest.raises(expr.ExpressionError) as parser_error:
        expr.compile_op("probe", "x", attack, params={"k": (25.0, 1.0, 100.0)})
    _submit_gradient(app, attack)
    app.page.get_by_test_id("stAlertContentError").first.wait_for()
    app.settle()
    app.screenshot("05b_editor_injection_refused")
    assert app.exceptions() == []
    assert app.figure(FIGURE_KEY) == plotted
    assert app.page.url == url_before
    assert not marker.exists()
    errors = app.errors()
    assert len(errors) == 1
    # shown verbatim: a message rendered as Markdown turns __import__ into a bold "import"
    assert str(parser_error.value) in errors[0], "the parser's message must be shown literally (escape Markdown)"
