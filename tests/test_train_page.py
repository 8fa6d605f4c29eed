"""The Train page, run headless with streamlit.testing.v1.AppTest."""

import itertools

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.shown import shown

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
    from explorer.train import trainer as train

    session = train.Session(task="xor", runs=[train.Run("atan", gradient="custom"), train.Run("atan", gradient="true")])
    session.step(3)
    app = AppTest.from_function(fragment_only_app, default_timeout=TIMEOUT)
    app.session_state["train.session"] = session
    app.session_state["train.target_epochs"] = 3
    app.session_state["train.running"] = False
    app.run()
    assert not app.exception
    assert [s.value for s in app.subheader] == ["Gradient flow through depth", "Results", "Decision boundaries"]
    assert app.dataframe[-1].value["epochs"].tolist() == [3, 3]


# -- presets ------------------------------------------------------------------------------------
def _markdown(app: AppTest) -> str:
    return "\n".join(m.value for m in app.markdown)


def _preset_app(key: str) -> AppTest:
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    app.query_params["preset"] = key
    return app.run()


# (preset, what "This run shows" must state, in numbers)
PRESET_NUMBERS = {
    "yin2019": r"ReLU STE ends at loss \*\*0\.4000\*\*.*w flips at step 27.*reaches \*\*1\.\d{3}\*\*",
    "dann": r"target accuracy \*\*0\.\d{3} ± 0\.\d{3}\*\* with gradient reversal against \*\*0\.\d{3} ± 0\.\d{3}\*\* "
    r"without, mean ± std over 10 seeds; reversal is better in \d+ of 10 seeds",
    "ste_bias": r"the exact gradient ends at q = \*\*0\.0\d\d\*\*.*straight-through settles at \*\*0\.4\d\d\*\* \(identity\) "
    r"and \*\*0\.4\d\d\*\* \(σ′\), beside q\* = 0\.450",
    "zenke2021": r"every shaped surrogate reaches \*\*0\.\d{3} to [01]\.\d{3}\*\*.*the true gradient \*\*0\.\d{3}\*\*",
    "depth": r"at initialisation sigmoid \(custom, slope=1\): \*\*0\.000\d+\*\* \(×0\.\d+ per layer\), "
    r"sigmoid \(custom, slope=10\): \*\*0\.\d+\*\* \(×0\.\d+ per layer\), "
    r"sigmoid \(custom, slope=100\): \*\*\d+\.\d+\*\* \(×1\.\d+ per layer\); at epoch 200: ",
}


@pytest.mark.slow
@pytest.mark.parametrize("key", list(PRESET_NUMBERS))
def test_every_preset_loads_from_its_url_sets_the_controls_and_shows_claim_and_numbers(key):
    import re

    from explorer.train import presets

    preset = presets.get(key)
    app = _preset_app(key)
    if preset.live:  # the depth preset trains on the page: let it finish
        assert app.session_state["train.running"]
        app = _finish(app, limit=400)
    assert not app.exception, app.exception
    assert app.selectbox(key="train.preset").value == key and app.query_params["preset"] == key
    setup = preset.state
    assert app.slider(key="train.depth").value == setup.depth and app.selectbox(key="train.task").value == setup.task
    assert app.number_input(key="train.epochs").value == setup.epochs
    text = _markdown(app)
    assert preset.claim in text and preset.reference in text
    assert re.search(PRESET_NUMBERS[key], text, flags=re.S), text
    if key == "yin2019":  # the Monte-Carlo check of the closed forms, on demand
        app.toggle(key="train.yin_monte_carlo").set_value(True).run()
        assert not app.exception
        captions = " ".join(c.value for c in app.caption)
        worst = re.search(r"largest \|monte carlo - closed form\| = ([0-9.]+) standard errors", captions)
        assert worst and float(worst.group(1)) < 5, captions
        assert any(len(frame.value) == 3 * 14 for frame in app.dataframe)  # 4 + 10 parameters per STE
    if preset.live:  # the numbers come from this session: 200 epochs of the preset's three runs
        assert app.session_state["train.session"].epoch == setup.epochs
        assert [s.value for s in app.subheader][-3:] == ["Gradient flow through depth", "Results", "Decision boundaries"]


def test_a_diverging_yin_learning_rate_is_a_warning_not_a_traceback():
    app = _preset_app("yin2019")
    app.number_input(key="train.yin_lr").set_value(2.0).run()
    assert not app.exception
    assert any("identity STE diverged at learning rate 2" in shown(w) for w in app.warning)


def test_unknown_url_preset_gives_a_notice_and_keeps_everything():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.epochs").set_value(7).run()
    app.query_params["preset"] = "<b>nope</b>"
    app.run()
    assert not app.exception
    assert any("Unknown preset '<b>nope</b>'" in shown(w) and "yin2019" in shown(w) for w in app.warning)
    assert app.number_input(key="train.epochs").value == 7  # nothing lost
    assert app.selectbox(key="train.preset").value == "" and "preset" not in app.query_params  # the default view
    app.selectbox(key="train.preset").set_value("yin2019").run()  # the next valid choice works
    assert not app.exception and app.query_params["preset"] == "yin2019"
    assert not any("Unknown preset" in w.value for w in app.warning)


def _ste_fixed_point(p: float, t: float) -> float:
    """The straight-through fixed point q* = t^(p-1) / (t^(p-1) + (1-t)^(p-1)), written here from the issue's formula."""
    return t ** (p - 1) / (t ** (p - 1) + (1 - t) ** (p - 1))


def test_a_preset_link_reproduces_its_own_view_controls_and_a_change_is_written_back():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    for key, value in {"preset": "ste_bias", "ste.p": "3", "ste.t": "0.3", "ste.op": "sigmoid"}.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception
    assert app.selectbox(key="train.ste_p").value == 3.0 and app.slider(key="train.ste_t").value == 0.3
    assert app.selectbox(key="train.ste_surrogate").value == "sigmoid"
    text = _markdown(app)  # the closed form drawn is the link's: p = 3, t = 0.3 (q* = 0.09 / 0.58)
    assert f"**{_ste_fixed_point(3.0, 0.3):.4f}**" in text and "**0.1552**" in text and "the sigmoid surrogate" in text
    app.slider(key="train.ste_t").set_value(0.25).run()
    assert app.query_params["ste.t"] == "0.25" and app.query_params["ste.p"] == "3"
    app.selectbox(key="train.ste_p").set_value(2.0).run()  # back to its default: the key leaves the URL
    assert "ste.p" not in dict(app.query_params) and app.query_params["ste.op"] == "sigmoid"


def test_bad_preset_view_values_in_a_link_are_notices_and_the_rest_is_kept():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    for key, value in {"preset": "yin2019", "yin.steps": "2.5", "yin.lr": "0.05", "yin.mc": "yes", "lr": "0.02"}.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception
    notices = " ".join(shown(w) for w in app.warning)
    assert "'yin.steps' = '2.5' must be a whole number in [1, 10000]; using 3000." in notices
    assert "'yin.mc' = 'yes' must be 0 or 1; using 0." in notices
    assert app.number_input(key="train.yin_steps").value == 3000 and app.number_input(key="train.yin_lr").value == 0.05
    assert app.number_input(key="train.lr").value == 0.02  # a training control of the same link is kept
    assert "learning rate 0.05" in _markdown(app)


def live_figure_app():
    import streamlit as st

    from explorer.ui import train as train_page

    builds = st.session_state.setdefault("builds", [])

    def build() -> dict:
        builds.append(len(builds))
        return {"data": [{"type": "scatter", "x": [0.0, float(len(builds))], "y": [1.0, 2.0]}], "layout": {}}

    first = train_page._live_figure("probe", ("session A", 10), 60.0, build)
    same = train_page._live_figure("probe", ("session A", 10), 60.0, build)  # same inputs, young: reused
    moved = train_page._live_figure("probe", ("session A", 20), 60.0, build)  # new inputs: rebuilt
    fresh = train_page._live_figure("probe", ("session A", 20), 0.0, build)  # max_age 0: always rebuilt
    st.session_state["outcome"] = (first is same, same is moved, moved is fresh, len(builds))


def test_live_charts_are_reused_only_for_the_same_inputs_within_their_age():
    """While training, a chart made from the same inputs is sent again (the same spec: the browser keeps
    its drawing) until it is too old; anything else gets a new figure."""
    app = AppTest.from_function(live_figure_app, default_timeout=TIMEOUT).run()
    assert not app.exception
    assert app.session_state["outcome"] == (True, False, False, 3)



def test_stop_halts_training_where_it_is_and_offers_start_again(monkeypatch):
    from explorer.train import trainer as train
    from explorer.ui import train as train_page

    # a tick trains at most 5 epochs, so the first tick cannot finish MAX_EPOCHS however fast the machine is
    monkeypatch.setenv(train_page.EPOCHS_PER_TICK_ENV, "5")
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.epochs").set_value(train.MAX_EPOCHS).run()

    def button(label: str):
        return next(b for b in app.button if b.label == label)

    button("Start").click().run()
    for _ in range(40):  # ticks (AppTest does not tick on its own) until training has begun
        if app.session_state["train.session"] is not None and app.session_state["train.session"].epoch > 0:
            break
        app.run()
    assert app.session_state["train.running"] and button("Stop").disabled is False
    button("Stop").click().run()
    stopped_at = app.session_state["train.session"].epoch
    assert not app.exception and not app.session_state["train.running"]
    assert 0 < stopped_at <= 5 < train.MAX_EPOCHS  # stopped part way: after the first tick, at most 5 epochs
    app.run().run()  # later runs of the page train no further
    assert app.session_state["train.session"].epoch == stopped_at
    assert button("Stop").disabled and not button("Start").disabled


def test_epochs_per_tick_caps_each_tick_so_training_spans_a_known_number_of_ticks(monkeypatch):
    from explorer.ui import train as train_page

    monkeypatch.setenv(train_page.EPOCHS_PER_TICK_ENV, "4")
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.epochs").set_value(10).run()
    next(b for b in app.button if b.label == "Start").click().run()
    epochs = [app.session_state["train.session"].epoch]
    while app.session_state["train.running"]:
        app.run()  # one tick per run (AppTest does not tick on its own)
        epochs.append(app.session_state["train.session"].epoch)
    assert not app.exception
    assert epochs[-1] == 10
    assert all(0 < later - earlier <= 4 for earlier, later in itertools.pairwise(epochs))  # 4 at most per tick
    assert len(epochs) >= 3  # 10 epochs at 4 a tick: at least three ticks


@pytest.mark.parametrize("text", ["0", "-3", "2.5", "many"])
def test_a_bad_epochs_per_tick_names_its_allowed_range(monkeypatch, text):
    from explorer.ui import train as train_page

    monkeypatch.setenv(train_page.EPOCHS_PER_TICK_ENV, text)
    with pytest.raises(ValueError, match="whole number of epochs >= 1"):
        train_page.epochs_per_tick()
    monkeypatch.setenv(train_page.EPOCHS_PER_TICK_ENV, " 12 ")
    assert train_page.epochs_per_tick() == 12
    monkeypatch.delenv(train_page.EPOCHS_PER_TICK_ENV)
    assert train_page.epochs_per_tick() is None


# -- the Train state in the URL ---------------------------------------------------------------------------
def _non_default_state():
    from explorer import state as url_state
    from explorer.train import trainer as train

    return url_state.TrainState(
        task="moons", n=128, noise=0.2, width=6, depth=2, optimizer="sgd", learning_rate=0.2, batch_size=32, epochs=4,
        seed=5, runs=(train.Run("sigmoid", {"slope": 5.0}), train.Run("sigmoid", gradient="true"), train.Run("atan", learn=True)),
    )  # fmt: skip


def test_a_train_url_of_non_default_controls_sets_every_widget_and_start_trains_exactly_that_state():
    """A copied link: every widget holds the URL's value, the URL is written back unchanged, and Start trains
    the same loss history as explorer.train.compare of that state (same seed, data, initial weights)."""
    from explorer import state as url_state
    from explorer.train import trainer as train

    state = _non_default_state()
    query = url_state.train_to_query(state)
    assert query["runs"] == "sigmoid:custom:slope=5;sigmoid:true;atan:custom::learn" and query["lr"] == "0.2"
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    for key, value in query.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception and not app.warning
    assert app.selectbox(key="train.task").value == "moons" and app.number_input(key="train.n").value == 128
    assert app.slider(key="train.noise").value == 0.2
    assert app.slider(key="train.width").value == 6 and app.slider(key="train.depth").value == 2
    assert app.selectbox(key="train.optimizer").value == "sgd" and app.number_input(key="train.lr").value == 0.2
    assert app.toggle(key="train.full_batch").value is False and app.number_input(key="train.batch_size").value == 32
    assert app.number_input(key="train.epochs").value == 4 and app.number_input(key="train.seed").value == 5
    table = app.session_state["train.runs_seed"]
    assert table.to_dict("list") == {
        "op": ["sigmoid", "sigmoid", "atan"], "gradient": ["custom", "true", "custom"],
        "params": ["slope=5", "", ""], "learn": [False, False, True],
    }  # fmt: skip
    assert app.session_state["train.state"] == state
    assert {key: app.query_params[key] for key in query} == query and set(dict(app.query_params)) == set(query)

    next(b for b in app.button if b.label == "Start").click().run()
    app = _finish(app)
    assert not app.exception
    page_results = app.session_state["train.session"].results()
    reference = train.compare(state)
    assert [r.run.label for r in page_results] == ["sigmoid (custom, slope=5)", "sigmoid (true)", "atan (custom, learnt)"]
    for here, there in zip(page_results, reference, strict=True):
        assert len(here.history) == 4
        np.testing.assert_array_equal(here.history["loss"].to_numpy(), there.history["loss"].to_numpy())
    assert {"learned op_1.alpha", "learned op_2.threshold"} <= set(page_results[2].history.columns)


def test_changing_a_control_writes_it_to_the_url_and_a_preset_link_keeps_its_short_form():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.lr").set_value(0.1).run()
    assert app.query_params["lr"] == "0.1" and "epochs" not in dict(app.query_params)
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    app.query_params["preset"] = "zenke2021"
    app.run()
    assert not app.exception
    assert set(dict(app.query_params)) == {"preset", "runs"}  # every other control is the preset's


def test_a_quick_second_edit_whose_rerun_carries_the_previous_url_keeps_both_edits():
    """A rerun carries the browser's URL, which may still be the one before the last rerun wrote its own (two
    quick edits): that URL is the page's own, not a link, and must not undo the first edit's successor."""
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.lr").set_value(0.07).run()
    after_lr = dict(app.query_params)
    app.number_input(key="train.epochs").set_value(30).run()
    assert dict(app.query_params) == after_lr | {"epochs": "30"}
    app.query_params.clear()
    app.query_params.update(after_lr)  # the browser had not yet shown the epochs URL when the next edit came
    app.number_input(key="train.seed").set_value(7).run()
    assert not app.exception
    assert app.number_input(key="train.epochs").value == 30 and app.number_input(key="train.lr").value == 0.07
    assert dict(app.query_params) == after_lr | {"epochs": "30", "seed": "7"}


def test_a_run_that_learns_its_parameters_draws_their_trajectory_and_states_the_equivalences():
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    app.query_params["runs"] = "atan:custom::learn;atan:custom"
    app.query_params["epochs"] = "6"
    app.run()
    assert app.session_state["train.runs_seed"]["learn"].tolist() == [True, False]
    next(b for b in app.button if b.label == "Start").click().run()
    app = _finish(app)
    assert not app.exception
    history = app.session_state["train.session"].results()[0].history
    assert history["learned op_1.alpha"].iloc[0] == 2.0 and history["learned op_1.alpha"].iloc[-1] != 2.0
    captions = " ".join(c.value for c in app.caption)
    assert "atan.threshold" in captions and "a bias before the op with the opposite sign" in captions
    assert "atan.alpha" in captions and "a gain" in captions
    assert "train.live.learned" in app.session_state  # the trajectory chart was drawn beside the loss


def test_a_training_run_is_named_in_the_url_and_a_link_to_a_run_this_server_lacks_says_it_was_lost():
    """Sessions live in one server process: after a replica died, the reconnected page (a new session from the
    URL) names the lost run instead of silently showing an empty page; Start trains it again and clears it."""
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    assert "run" not in app.query_params  # nothing trained, nothing to name
    app.number_input(key="train.epochs").set_value(3)
    app.button[0].click().run()  # Start
    run_id = app.session_state["train.run_id"]
    assert len(run_id) == 8 and app.query_params["run"] == run_id
    assert not any("not on this server" in w.value for w in app.warning)

    query = dict(app.query_params)
    elsewhere = AppTest.from_function(train_app, default_timeout=TIMEOUT)
    elsewhere.query_params.update(query)  # the same link reaching another process: no such run there
    elsewhere.run()
    assert not elsewhere.exception
    lost = [w.value for w in elsewhere.warning if "not on this server" in w.value]
    assert len(lost) == 1 and run_id in lost[0] and "Start" in lost[0]
    assert elsewhere.number_input(key="train.epochs").value == 3  # the view came back from the URL
    assert "run" not in elsewhere.query_params  # this session holds no run yet
    elsewhere.run()  # the notice stays until the user acts
    assert any("not on this server" in w.value for w in elsewhere.warning)
    elsewhere.button[0].click().run()  # Start: a new run, the notice goes
    assert not any("not on this server" in w.value for w in elsewhere.warning)
    assert elsewhere.query_params["run"] == elsewhere.session_state["train.run_id"] != run_id


def test_a_rerun_whose_url_still_names_this_sessions_previous_run_is_not_a_lost_run():
    """The browser's URL may lag a rerun behind (Start twice quickly): a run id this session made is its own."""
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.number_input(key="train.epochs").set_value(2)
    app.button[0].click().run()
    first = app.session_state["train.run_id"]
    app = _finish(app)
    app.button[0].click().run()  # Start again: a new run id
    second = app.session_state["train.run_id"]
    assert second != first
    app.query_params["run"] = first  # the rerun carries the URL of before
    app.run()
    assert not any("not on this server" in w.value for w in app.warning)
    assert app.query_params["run"] == second
