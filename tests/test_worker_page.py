"""The Explore page with a team's module whose backwards end or block their process (AppTest, no browser):
selecting each bad function shows how it ended in place of the figure, the app (this process) goes on,
the good function still draws, and another session keeps answering."""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from explorer.explore import sweeps
from tests.processes import serving
from tests.test_explore_page import _trace, _values
from tests.test_worker_ops import CAUSES, FIXTURE
from tests.test_yours_page import _figure

pytestmark = pytest.mark.slow  # worker processes that crash and are restarted: minutes

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 180
CALL_SECONDS = 10


@pytest.fixture(scope="module")
def crashing_env():
    with serving(FIXTURE, CALL_SECONDS, check_seconds=20):  # 20: the checks panel of a hanging function
        yield


def _draws_identity(app: AppTest) -> None:
    assert not app.exception and not app.error
    custom = _trace(_figure(app), "custom gradient")
    x = _values(custom, "x")
    assert len(x) > 100
    np.testing.assert_array_equal(_values(custom, "y"), np.ones_like(x))


def _draws_atan(app: AppTest, alpha: float) -> None:
    """The built-in atan's custom gradient as drawn equals a sweep of it made here."""
    assert not app.exception
    custom = _trace(_figure(app), "custom gradient")
    reference = sweeps.sweep("atan", params={"alpha": alpha})
    x, y = _values(custom, "x"), _values(custom, "y")
    np.testing.assert_allclose(y, np.interp(x, reference["x"], reference["custom_grad"]), rtol=1e-5, atol=1e-6)


def test_each_bad_function_shows_how_it_ended_and_the_app_goes_on(crashing_env):
    app = AppTest.from_file(APP, default_timeout=TIMEOUT)
    app.query_params["op"] = "good_identity"
    app.run()
    _draws_identity(app)
    other = AppTest.from_file(APP, default_timeout=TIMEOUT)  # another user's session, on a built-in op
    other.query_params["op"] = "atan"
    other.run()
    _draws_atan(other, 2.0)  # its default
    for number, (key, cause) in enumerate(CAUSES.items()):
        app.selectbox(key="w.op").set_value(key).run()
        assert not app.exception
        [error] = [e.value for e in app.error]
        assert error.startswith("**Your op failed.**") and key.replace("_", r"\_") in error
        assert cause.format(seconds=CALL_SECONDS) in error
        assert not app.get("plotly_chart") or all("main_figure" not in (c.proto.id or "") for c in app.get("plotly_chart"))
        # the app's server is this process: still running its pages here is what "alive" means
        alpha = 3.0 + number
        other.slider(key="w.p.atan.alpha").set_value(alpha).run()  # the other session answers
        _draws_atan(other, alpha)
        app.selectbox(key="w.op").set_value("good_identity").run()
        _draws_identity(app)
