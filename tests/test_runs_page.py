"""The Runs page, headless (AppTest), on runs written with the run folder's writer: values checked against the
Parquet files read here, and shares worked out here from the recorded histogram."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from explorer.runs import synthetic
from explorer.watch.run_folder import RunWriter
from tests.runs_fixtures import SENTINEL_MODEL, figure, make_runs, open_page, table, values


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("runs-page"))


@pytest.fixture(scope="module")
def binary_view(runs):
    """clip-a's ste_sign layer at step 12, opened from a URL."""
    return open_page(runs["root"], {"run": "clip-a", "layer": "binary_1", "step": "12"})


def _texts(app) -> str:
    parts = [e.value for kind in ("markdown", "caption", "warning", "info", "header", "subheader") for e in getattr(app, kind)]
    return "\n".join(str(p) for p in parts)


def test_the_list_shows_every_run_newest_first_with_its_state_and_steps(runs):
    app = open_page(runs["root"])
    assert not app.exception
    listed = app.dataframe[0].value
    by_name = listed.set_index("run")
    assert set(listed["run"]) == {"clip-a", "clip-b", "stale"}  # the link out of the folder is not listed
    assert by_name.loc["clip-a", "steps recorded"] == 30 and by_name.loc["clip-b", "steps recorded"] == 20
    assert by_name.loc["clip-a", "state"] == "finished"
    assert by_name.loc["stale", "state"].startswith("stopped before its end")
    assert by_name.loc["clip-a", "ops"] == "fast_sigmoid, ste_sign" and by_name.loc["clip-a", "model"] == "synthetic_mlp"
    started = listed["started"].tolist()
    assert started == sorted(started, reverse=True)
    assert SENTINEL_MODEL not in _texts(app)


def test_opening_a_run_from_the_list_shows_its_first_layer_at_the_newest_step(runs):
    app = open_page(runs["root"])
    app.selectbox(key="runs.w.open").set_value("clip-b").run()
    assert not app.exception and not app.warning
    assert app.header[0].value == "Run clip-b"
    assert app.subheader[0].value == "spike_0 at step 20"
    assert app.query_params["run"] == "clip-b" and "step" not in app.query_params  # the newest: it follows


def test_the_layer_view_draws_the_recorded_histogram_behind_the_ops_figure(runs, binary_view):
    app = binary_view
    assert not app.exception and not app.warning
    assert app.subheader[0].value == "binary_1 at step 12"
    spec = figure(app, "runs.layer_figure")
    recorded = table(runs["root"], "clip-a", "histograms")
    row = recorded[(recorded["step"] == 12) & (recorded["layer"] == "binary_1")].iloc[0]
    bars = [t for t in spec["data"] if t["type"] == "bar"]
    assert len(bars) == 3  # one per panel: forward, true gradient, custom gradient
    counts = [int(text.split(": ")[1].split(" inputs")[0].replace(",", "")) for text in bars[0]["text"]]
    assert counts == list(row["counts"])
    centres = values(bars[0]["x"])
    edges = np.linspace(row["lo"], row["hi"], len(row["counts"]) + 1)
    assert np.allclose(centres, (edges[:-1] + edges[1:]) / 2)
    # the tallest bar reaches 85 % of its panel's height
    heights = values(bars[0]["y"])
    y_range = spec["layout"]["yaxis"]["range"]
    assert heights.max() == pytest.approx(0.85 * (y_range[1] - y_range[0]))
    # the clip boundaries of ste_sign (clip_value 1) are marked in every panel
    bounds = sorted({shape["x0"] for shape in spec["layout"]["shapes"] if shape.get("line", {}).get("dash") == "dash"})
    assert bounds == [-1.0, 1.0]
    # the shares written on the figure are the recorded ones
    layers = table(runs["root"], "clip-a", "layers")
    recorded_row = layers[(layers["step"] == 12) & (layers["layer"] == "binary_1")].iloc[0]
    note = next(a["text"] for a in spec["layout"]["annotations"] if "zero gradient" in a.get("text", ""))
    assert f"zero gradient {100 * recorded_row['zero_grad_share']:.3g} %" in note
    assert f"below the lower boundary {100 * recorded_row['below_share']:.3g} %" in note
    # the custom gradient of ste_sign is drawn: 1 inside the window, 0 outside
    custom = next(t for t in spec["data"] if t.get("name") == "custom gradient")
    x, g = values(custom["x"]), values(custom["y"])
    assert np.all(g[np.isfinite(g) & (np.abs(x) < 0.99)] == 1.0) and np.all(g[np.isfinite(g) & (np.abs(x) > 1.01)] == 0.0)


def test_over_steps_depth_and_loss_show_the_recorded_values(runs, binary_view):
    app = binary_view
    layers = table(runs["root"], "clip-a", "layers")
    mine = layers[layers["layer"] == "binary_1"].sort_values("step")
    over = figure(app, "runs.over_steps")
    zero = next(t for t in over["data"] if t["name"] == "zero gradient")
    assert values(zero["x"]).tolist() == mine["step"].tolist()
    assert np.allclose(values(zero["y"]), mine["zero_grad_share"])
    flips = next(t for t in over["data"] if t["name"] == "flip ratio")
    assert np.allclose(values(flips["y"]), mine["flip_ratio"], equal_nan=True)
    depth = figure(app, "runs.depth")
    at = layers[layers["step"] == 12].sort_values("depth")
    assert np.allclose(values(depth["data"][0]["y"]), at["grad_norm"]) and values(depth["data"][0]["x"]).tolist() == [0, 1]
    loss = figure(app, "runs.loss")
    steps = table(runs["root"], "clip-a", "steps").sort_values("step")
    assert np.allclose(values(loss["data"][0]["y"]), steps["loss"])


def test_the_step_slider_moves_the_view_and_the_url(runs):
    app = open_page(runs["root"], {"run": "clip-a", "layer": "binary_1"})
    app.slider(key="runs.w.step").set_value(7).run()
    assert not app.exception and app.subheader[0].value == "binary_1 at step 7"
    assert app.query_params["step"] == "7"
    recorded = table(runs["root"], "clip-a", "histograms")
    row = recorded[(recorded["step"] == 7) & (recorded["layer"] == "binary_1")].iloc[0]
    bars = next(t for t in figure(app, "runs.layer_figure")["data"] if t["type"] == "bar")
    assert sum(int(t.split(": ")[1].split(" inputs")[0]) for t in bars["text"]) == int(np.sum(row["counts"]))
    app.slider(key="runs.w.step").set_value(30).run()  # the last step: follow the run again
    assert "step" not in app.query_params and app.subheader[0].value == "binary_1 at step 30"


def test_a_step_that_was_not_recorded_shows_the_nearest_with_a_notice(runs):
    app = open_page(runs["root"], {"run": "clip-b", "step": "1000"})
    assert not app.exception
    assert any("Step 1,000 is not recorded" in w.value and "20" in w.value for w in app.warning)
    assert app.subheader[0].value == "spike_0 at step 20"


def test_what_if_shares_are_those_worked_out_from_the_recorded_histogram(runs, binary_view):
    app = binary_view
    app.slider(key="runs.w.wi.ste_sign.clip_value").set_value(1.5).run()
    assert not app.exception
    assert app.query_params["wi"] == "ste_sign" and app.query_params["wi.clip_value"] == "1.5"
    recorded = table(runs["root"], "clip-a", "histograms")
    row = recorded[(recorded["step"] == 12) & (recorded["layer"] == "binary_1")].iloc[0]
    counts = np.asarray(row["counts"])
    edges = np.linspace(row["lo"], row["hi"], counts.size + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    total = counts.sum() + row["underflow"] + row["overflow"]
    shown = app.dataframe[-1].value
    assert shown["backward"].tolist() == ["recorded: ste_sign (clip_value = 1)", "what if: ste_sign (clip_value = 1.5)"]
    for clip, (_, line) in zip((1.0, 1.5), shown.iterrows(), strict=True):
        assert line["zero-gradient share"] == pytest.approx(counts[np.abs(centres) > clip].sum() / total)
        assert line["expected gradient mass"] == pytest.approx(counts[np.abs(centres) <= clip].sum() / total)
    assert "not a new training run" in _texts(app)
    # another op: a spike surrogate on the same inputs never gives exactly zero
    app.selectbox(key="runs.w.wi_op").set_value("fast_sigmoid").run()
    assert app.dataframe[-1].value["zero-gradient share"].tolist()[-1] == 0.0
    assert app.query_params["wi"] == "fast_sigmoid"


def test_the_explore_link_carries_the_op_its_parameters_and_the_inputs_range(runs, binary_view):
    from tests.test_explore_page import _app as explore_app

    url = binary_view.get("link_button")[0].proto.url
    parts = urlsplit(url)
    assert parts.path == "/"  # Explore is the app's root page
    query = {key: value[-1] for key, value in parse_qs(parts.query).items()}
    layers = table(runs["root"], "clip-a", "layers")
    row = layers[(layers["step"] == 12) & (layers["layer"] == "binary_1")].iloc[0]
    assert query["op"] == "ste_sign"
    assert float(query["lo"]) == row["p0_1"] and float(query["hi"]) == row["p99_9"]
    explore = explore_app(query)
    assert not explore.exception and not explore.warning
    assert explore.number_input(key="w.lo").value == row["p0_1"] and explore.number_input(key="w.hi").value == row["p99_9"]
    assert explore.slider(key="w.p.ste_sign.clip_value").value == 1.0


def test_compared_runs_share_the_axes_aligned_by_step(runs):
    app = open_page(runs["root"], {"run": "clip-a", "layer": "binary_1", "cmp": "clip-b"})
    assert not app.exception and not app.warning
    assert app.multiselect(key="runs.w.cmp").value == ["clip-b"]
    spec = figure(app, "runs.compare")
    names = {t["name"] for t in spec["data"]}
    assert names == {"clip-a: ste_sign (clip_value = 1)", "clip-b: ste_sign (clip_value = 1)"}
    other = table(runs["root"], "clip-b", "layers")
    other = other[other["layer"] == "binary_1"].sort_values("step")
    trace = next(t for t in spec["data"] if t["name"].startswith("clip-b") and t["yaxis"] == "y")
    assert values(trace["x"]).tolist() == other["step"].tolist()
    assert np.allclose(values(trace["y"]), other["zero_grad_share"])
    app.multiselect(key="runs.w.cmp").unselect("clip-b").run()
    assert "cmp" not in app.query_params and not any(c.key == "runs.compare" for c in app.get("plotly_chart"))


def test_the_downloads_are_offered_and_the_view_file_holds_the_figures_and_link(runs, binary_view):
    from explorer.ui import runs as runs_page

    labels = [button.proto.label for button in binary_view.get("download_button")]
    assert labels == ["steps as CSV", "steps as Parquet", "Download this view (HTML)"]
    spec = figure(binary_view, "runs.loss")
    frame = table(runs["root"], "clip-a", "layers")
    page = runs_page._view_file("clip-a", "http://localhost:8501/runs?run=clip-a&step=12", 12, "binary_1",
                                frame[frame["step"] == 12], {"loss": spec})()  # fmt: skip
    assert "Run clip-a: binary_1 at step 12" in page and "http://localhost:8501/runs?run=clip-a&amp;step=12" in page
    assert "plotly" in page and "binary_1" in page
    assert len(runs_page._parquet_bytes(frame)) > 100


def test_a_truncated_part_shows_what_is_whole_and_names_the_file(tmp_path):
    root = tmp_path / "runs"
    synthetic.write_run(root, "cut", 12, 2, flush_every=4)  # three parts per table: steps 1-4, 5-8, 9-12
    parts = sorted((root / "cut" / "layers").glob("part-*.parquet"))
    assert len(parts) == 3
    parts[1].write_bytes(parts[1].read_bytes()[:-40])  # cut short, as by a writer killed mid-copy
    app = open_page(root, {"run": "cut", "layer": "binary_1", "step": "3"})
    assert not app.exception
    named = [w.value for w in app.warning if parts[1].name in w.value]
    assert named and "layers/" in named[0]
    over = figure(app, "runs.over_steps")
    zero = next(t for t in over["data"] if t["name"] == "zero gradient")
    assert values(zero["x"]).tolist() == [1, 2, 3, 4, 9, 10, 11, 12]  # the whole parts' steps


def test_a_live_run_is_followed_as_it_records(tmp_path):
    root = tmp_path / "runs"
    writer = RunWriter(root, "live", synthetic.info(2), flush_seconds=0)
    base = np.random.default_rng(0).standard_normal((2, 256))
    previous: dict = {}

    def record(step: int) -> None:
        layer_rows, histogram_rows, step_row = synthetic.records(step, 2, base, previous)
        writer.append("layers", layer_rows)
        writer.append("histograms", histogram_rows)
        writer.append("steps", [step_row])

    for step in (1, 2, 3):
        record(step)
    app = open_page(root, {"run": "live"})
    assert not app.exception and "live (being written)" in app.caption[1].value
    assert app.subheader[0].value == "spike_0 at step 3"
    for step in (4, 5):
        record(step)
    app.run()  # what the fragment's timer does in a browser
    assert app.subheader[0].value == "spike_0 at step 5"
    slider = app.slider(key="runs.w.step")
    # live: the slider reaches past the last record, and its right end is "the newest" (the thumb never moves)
    assert slider.label.startswith("Step (recorded: 1 to 5 · right end: the newest") and slider.value == slider.max == 6
    slider.set_value(2).run()
    assert app.subheader[0].value == "spike_0 at step 2" and app.query_params["step"] == "2"
    record(6)
    app.run()
    assert app.subheader[0].value == "spike_0 at step 2"  # a chosen step stays while the run grows
    app.slider(key="runs.w.step").set_value(6).run()
    assert "step" not in app.query_params and app.subheader[0].value == "spike_0 at step 6"
    writer.close()
    app.run()
    assert "finished" in app.caption[1].value
    assert app.slider(key="runs.w.step").max == 6  # finished: the slider ends at the last record


def test_a_run_deleted_while_shown_gives_a_notice_and_the_list(tmp_path):
    root = tmp_path / "runs"
    synthetic.write_run(root, "doomed", 4, 2)
    synthetic.write_run(root, "kept", 4, 2)
    app = open_page(root, {"run": "doomed"})
    assert app.header[0].value == "Run doomed"
    shutil.rmtree(root / "doomed")
    app.run()
    assert not app.exception
    assert any("no run 'doomed'" in w.value for w in app.warning)
    assert app.dataframe[0].value["run"].tolist() == ["kept"]
    assert "run" not in app.query_params


def test_over_steps_figures_read_a_bounded_spread_of_steps():
    from explorer.ui.runs import MAX_SERIES_STEPS, nearest_step, spread_steps

    steps = list(range(10, 100_001, 10))
    spread = spread_steps(steps, MAX_SERIES_STEPS)
    assert len(spread) == MAX_SERIES_STEPS and spread[0] == 10 and spread[-1] == 100_000
    assert set(spread) <= set(steps) and spread == sorted(spread)
    assert spread_steps([3, 5], MAX_SERIES_STEPS) == [3, 5]
    assert nearest_step(steps, 14) == 10 and nearest_step(steps, 15) == 10 and nearest_step(steps, 16) == 20
    assert nearest_step(steps, 10**9) == 100_000


def test_the_step_sliders_top_moves_a_few_times_in_a_runs_life():
    from explorer.ui.runs import slider_top

    assert slider_top(1, 5, 1) == 6  # a span of 4 -> 5
    assert slider_top(0, 205, 1) == 500
    assert slider_top(0, 600, 100) == 1000
    assert slider_top(10, 10_005, 10) == 10_010
    tops = {slider_top(0, last, 1) for last in range(1, 10_001)}
    assert tops == {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000}


@pytest.mark.parametrize(("age_hours", "shown"), [(1, True), (13, False)])
def test_the_self_refreshing_views_end_an_expired_sign_in(runs, monkeypatch, age_hours, shown):
    """With --login, a refresh of the run's view or of the list (a fragment: it skips the page's gate) signs out a
    sign-in older than the session limit (12 h by default) instead of showing the run."""
    import os
    import time

    from streamlit.testing.v1 import AppTest

    from explorer import serve
    from explorer.serve import login
    from tests.runs_fixtures import runs_app

    for name in (login.MAX_SESSION_HOURS_ENV, login.ALLOWED_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(login.LOGIN_ENV, "oidc")
    os.environ[serve.RUNS_ENV] = str(runs["root"])
    app = AppTest.from_function(runs_app, default_timeout=120)
    app.query_params["run"] = "clip-a"
    app.user = {"is_logged_in": True, "email": "alice@example.com", "iat": time.time() - age_hours * 3600.0}
    app.run()
    assert not app.exception
    assert bool(app.get("plotly_chart")) is shown
    assert app.user["is_logged_in"] is shown


def _view_after_a_late_report(root: Path, run: str, layer: str, reported: str, state_layer: str | None = None):
    """The run view of ``run`` (layer ``layer``, step 12) after a late report of ``reported`` in the list's box (a
    browser resending the choice that opened it, at a timer's rerun of the view alone), as the view's fragment runs
    it: ``_on_open``, then ``_run_view``. ``state_layer`` replaces the layer first (a state left without one)."""

    def script(root: str, run: str, layer: str, reported: str, state_layer) -> None:
        from dataclasses import replace
        from pathlib import Path

        import streamlit as st

        from explorer.state.runs import RunsState
        from explorer.ui import runs

        if runs.STATE_KEY not in st.session_state:  # the first run only: a rerun of the view keeps what it set
            state = RunsState(run=run, layer=layer, step=12)
            st.session_state[runs.STATE_KEY] = state if state_layer is None else replace(state, layer=state_layer)
            st.session_state["runs.w.open"] = reported
            runs._on_open("runs.w.open")
        runs._run_view(Path(root), run)

    app = AppTest.from_function(script, args=(str(root), run, layer, reported, state_layer), default_timeout=120)
    return app.run()


def test_a_late_report_of_the_open_run_keeps_its_view_and_another_run_opens_it(runs):
    app = _view_after_a_late_report(runs["root"], "clip-a", "binary_1", reported="clip-a")
    assert not app.exception
    assert app.subheader[0].value == "binary_1 at step 12"  # not reset to the first layer at the newest step
    assert app.query_params["layer"] == "binary_1" and app.query_params["step"] == "12"
    other = _view_after_a_late_report(runs["root"], "clip-a", "binary_1", reported="clip-b")
    assert other.query_params["run"] == "clip-b" and "step" not in other.query_params  # a new choice: a new view


def test_a_view_run_alone_with_no_layer_picked_shows_the_first_as_the_sidebar_does(runs):
    app = _view_after_a_late_report(runs["root"], "clip-a", "binary_1", reported="clip-a", state_layer="")
    assert not app.exception
    assert app.subheader[0].value == "spike_0 at step 12"  # never " at step 12" with no layer
    assert app.query_params["layer"] == "spike_0"
