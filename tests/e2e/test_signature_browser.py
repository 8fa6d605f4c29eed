"""A function of two inputs in a real browser: grad_reverse(x, lam) drawn, its lam slider moved."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from explorer.bench import harness
from explorer.serve import OPS_ENV
from tests.e2e.conftest import ARTIFACTS, TRACE_JS, App

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


# True once every finite point of the drawn custom gradient is `value` (to float32 precision).
CUSTOM_IS_JS = f"""(value) => {{
  const finite = ({TRACE_JS})(['main_figure', 'custom gradient']).y.filter(Number.isFinite);
  return finite.length > 100 && finite.every((v) => Math.abs(v - value) <= 1e-6 * Math.abs(value));
}}"""


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
    # Three presses can reach the server as one value or as several reruns (1.01 first on a busy machine):
    # wait for the event "the server took the last one", not for the first figure change.
    app.wait_query_value("i.lam", "1.03")
    assert app.query()["i.lam"] == ["1.03"]
    # Then for the drawing of that run (plotly.js draws after the run's data arrived); on a timeout the
    # assertion below says what was drawn instead.
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # here: without playwright, conftest skips

    with contextlib.suppress(PlaywrightTimeout):
        app.page.wait_for_function(CUSTOM_IS_JS, arg=-1.03, timeout=30_000)
    assert app.figure() != before
    np.testing.assert_allclose(_custom(app), -1.03, rtol=1e-6)
    assert app.exceptions() == []
    app.screenshot("signature_grad_reverse")
