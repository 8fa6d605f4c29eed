"""The Train page, run headless with streamlit.testing.v1.AppTest."""

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

TIMEOUT = 120


def train_app():
    import streamlit as st  # noqa: F401

    from explorer.ui import runtime, train

    runtime.keep_keras_state_between_reruns()
    train.page()


def _finish(app: AppTest, limit: int = 40) -> AppTest:
    """Rerun until the live fragment has trained to the target (AppTest does not tick on its own)."""
    for _ in range(limit):
        if not app.session_state["train.running"]:
            return app
        app.run()
    raise AssertionError("training did not finish")


@pytest.fixture(scope="module")
def trained():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    assert not app.exception
    app.number_input(key="train.epochs").set_value(5).run()
    app.button[0].click().run()  # Start
    return _finish(app)


def test_five_epoch_comparison_of_two_runs_shows_both_in_the_results(trained):
    app = trained
    assert not app.exception and not app.error
    assert [s.value for s in app.subheader][-2:] == ["Results", "Decision boundaries"]
    table = app.dataframe[-1].value
    assert table["run"].tolist() == ["ste_sign (custom)", "ste_sign (true)"]
    assert table["epochs"].tolist() == [5, 5]
    # the point of the demo: the true gradient of sign passes nothing to the first layer
    assert table["status"].tolist() == ["ok", "no_gradient"]
    assert any("all-zero gradient" in w.value for w in app.warning)


def test_step_trains_one_epoch_and_reset_discards(trained):
    app = trained
    app.button[2].click().run()  # Step: a new session from the same settings continues the current one
    assert app.session_state["train.session"].epoch == 6
    app.button[3].click().run()  # Reset
    assert app.session_state["train.session"] is None and not app.exception


def test_bad_run_rows_get_a_message_and_no_exception():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.session_state["train.runs_seed"] = pd.DataFrame(
        {"op": ["atan", "atan"], "mode": ["custom", "custom"], "params": ["alpha=99", "beta"]}
    )
    app.run()
    assert not app.exception
    text = " ".join(w.value for w in app.warning)
    assert "alpha" in text and "name=value" in text
