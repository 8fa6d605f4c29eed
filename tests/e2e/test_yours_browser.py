"""Your own ops in a real browser: a server started with GRADIENT_EXPLORER_OPS=examples (and a missing module)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.bench import harness
from explorer.serve import OPS_ENV
from tests.e2e.conftest import ARTIFACTS, SETTLE_SECONDS, App

pytestmark = pytest.mark.e2e

MISSING = "no_such_module_e2e"


@pytest.fixture(scope="module")
def yours_server():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {OPS_ENV: f"examples,{MISSING}"}
    with harness.serve_app(log_path=ARTIFACTS / "streamlit_yours.log", env=env) as server:
        yield server


@pytest.fixture
def yours_app(browser, yours_server):
    context = browser.new_context(viewport=harness.VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield App(page, yours_server.url)
    context.close()


def test_loaded_examples_draw_a_figure_report_the_missing_module_and_show_the_checks(yours_app):
    app = yours_app.open(query={"op": "square_with_scaled_grad"})
    figure = app.wait_figure()
    assert app.exceptions() == []
    assert app.title() == "square_with_scaled_grad"
    assert "True gradient (numerical)" in figure["titles"]
    x, y = (np.asarray(values, dtype=float) for values in app.trace("custom gradient"))
    finite = np.isfinite(x) & np.isfinite(y)
    assert finite.sum() > 100
    np.testing.assert_allclose(y[finite], x[finite], rtol=1e-5, atol=1e-6)  # half of d(x^2)/dx
    # the missing module only: every example of any signature is drawn
    [error] = app.errors()
    assert f"Could not load {MISSING} from" in error and "ModuleNotFoundError" in error
    # the checks arrive by themselves (a polling fragment), without a click (the page's Why box says "half of
    # autodiff" too: the declared justification; only the checks' row says "intentional: ...")
    app.page.get_by_text("intentional: the custom gradient is half of autodiff").first.wait_for(
        state="attached", timeout=SETTLE_SECONDS * 1000
    )
    app.screenshot("yours_square")
    # a pitfall: its message in place of the figure, the page still usable
    app.open(query={"op": "double_with_summed_grad"})
    assert any("gradient has shape ()" in text for text in app.errors())
    assert app.figure() is None and app.exceptions() == []
