"""A function of two inputs in a real browser: grad_reverse(x, lam) drawn, its lam slider moved."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.bench import harness
from explorer.serve import OPS_ENV
from tests.e2e.conftest import ARTIFACTS, App

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def reversal_server():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {OPS_ENV: "examples/gradient_reversal.py"}
    with harness.serve_app(log_path=ARTIFACTS / "streamlit_signature.log", env=env) as server:
        yield server


@pytest.fixture
def reversal_app(browser, reversal_server):
    context = browser.new_context(viewport=harness.VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield App(page, reversal_server.url)
    context.close()


def _custom(app: App) -> np.ndarray:
    _, y = (np.asarray(values, dtype=float) for values in app.trace("custom gradient"))
    return y[np.isfinite(y)]


def test_grad_reverse_draws_and_its_lam_slider_moves_the_custom_gradient(reversal_app):
    app = reversal_app.open(query={"op": "grad_reverse"})
    before = app.wait_figure()
    assert app.exceptions() == [] and app.errors() == []
    assert app.title() == "grad_reverse"
    custom = _custom(app)
    assert custom.size > 100
    np.testing.assert_allclose(custom, -1.0)  # -lam, lam at its default 1
    thumb = app.page.get_by_test_id("stSlider").filter(has_text="lam (input held fixed)").get_by_role("slider")
    thumb.focus()
    for _ in range(3):
        thumb.press("ArrowRight")  # step 0.01
    app.wait_figure_change(before)
    app.settle()
    lam = float(app.query()["i.lam"][0])
    assert lam == pytest.approx(1.03)
    np.testing.assert_allclose(_custom(app), -lam, rtol=1e-6)
    assert app.exceptions() == []
    app.screenshot("signature_grad_reverse")
