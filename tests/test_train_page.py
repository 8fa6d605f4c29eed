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
        {"op": ["atan", "atan"], "gradient": ["custom", "custom"], "params": ["alpha=99", "beta"]}
    )
    app.run()
    assert not app.exception
    text = " ".join(w.value for w in app.warning)
    assert "alpha" in text and "name=value" in text


def test_start_uses_the_epochs_typed_in_the_same_interaction():
    """A browser sends a field's new value and the click that took its focus in one interaction:
    Start must train for that value, not for the one the page rendered with (issue: "epoch 1 of 300")."""
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.epochs").set_value(7)
    app.button[0].click().run()  # Start, in the same run as the new value
    assert not app.exception
    assert app.session_state["train.target_epochs"] == 7
    app = _finish(app)
    assert app.session_state["train.session"].epoch == 7
    assert app.dataframe[-1].value["epochs"].tolist() == [7, 7]


def test_start_uses_the_task_changed_in_the_same_interaction():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.epochs").set_value(2).run()
    app.selectbox(key="train.task").set_value("circles")
    app.button[0].click().run()
    assert app.session_state["train.session"].dataset.name == "circles"


def fragment_only_app():
    """What a late timer tick runs: the training view alone, without the rest of the page."""
    from explorer.ui import runtime, train

    runtime.keep_keras_state_between_reruns()
    train._training_view()


def test_any_run_of_the_training_view_draws_the_results_of_a_finished_session():
    """Results are derived, not an event: a fragment run after training ended shows them too, so a
    full rerun that never reaches the browser cannot leave the user at 100 % without results."""
    from explorer import train

    session = train.Session("xor", [train.Run("atan", gradient="custom"), train.Run("atan", gradient="true")])
    session.step(3)
    app = AppTest.from_function(fragment_only_app, default_timeout=TIMEOUT)
    app.session_state["train.session"] = session
    app.session_state["train.target_epochs"] = 3
    app.session_state["train.running"] = False
    app.run()
    assert not app.exception
    assert [s.value for s in app.subheader] == ["Gradient flow through depth", "Results", "Decision boundaries"]
    assert app.dataframe[-1].value["epochs"].tolist() == [3, 3]
