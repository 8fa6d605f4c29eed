"""The live-training figures are built as plain specs (no plotly validation on the server thread):
each spec must still be a valid plotly figure (``go.Figure(spec)`` validates it), drawing what is
listed here by hand from the histories: lines, values, panels, styles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from explorer.train.figures import layer_norm_figure_spec, loss_figure_spec


def _history(epochs: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "epoch": np.arange(1, epochs + 1),
            "loss": rng.random(epochs),
            "grad_norm_1": rng.random(epochs) + 0.1,
            "grad_norm_2": rng.random(epochs) + 0.1,
            "grad_norm_output": rng.random(epochs) + 0.1,
        }
    )


@pytest.mark.parametrize("log_y", [False, True])
def test_loss_spec_is_a_valid_figure_with_each_run_s_losses(log_y):
    histories = [_history(12, 0), _history(5, 1)]
    fig = go.Figure(loss_figure_spec(histories, ["custom", "true"], log_y=log_y))  # validates every property
    assert [t.name for t in fig.data] == ["custom", "true"]
    np.testing.assert_array_equal(fig.data[1].y, histories[1]["loss"].to_numpy())
    np.testing.assert_array_equal(fig.data[0].x, np.arange(1, 13))
    assert fig.layout.yaxis.type == ("log" if log_y else "linear")
    assert fig.layout.yaxis.title.text == "loss" + (" (log scale)" if log_y else "")


def test_layer_spec_places_runs_on_make_subplots_panels_and_titles_the_first_column():
    runs = 5  # two rows of three panels: the fifth run sits on row 2, column 2
    histories = [_history(9, seed) for seed in range(runs)]
    fig = go.Figure(layer_norm_figure_spec(histories, [f"run {k}" for k in range(runs)]))  # validates
    reference = make_subplots(rows=2, cols=3, shared_yaxes="all")
    expected_axes = reference.get_subplot(2, 2)
    fifth = [t for t in fig.data if t.text[0].startswith("run 4,")]
    assert fifth and {(t.xaxis, t.yaxis) for t in fifth} == {
        (expected_axes.xaxis.plotly_name.replace("axis", ""), expected_axes.yaxis.plotly_name.replace("axis", ""))
    }
    # epoch 9's norms of run 4, straight from its history
    last = next(t for t in fifth if t.name == "epoch 9")
    np.testing.assert_allclose(last.y, histories[4].iloc[8][["grad_norm_1", "grad_norm_2", "grad_norm_output"]].to_numpy(float))
    titled = sorted(name for name in fig.layout if name.startswith("yaxis") and fig.layout[name].title.text)
    first_column = {reference.get_subplot(row, 1).yaxis.plotly_name for row in (1, 2)}
    assert set(titled) == first_column
    assert all(fig.layout[name].type == "log" for name in fig.layout if name.startswith("yaxis"))


# Hand-listed references (no copy of the old construction): which epochs a panel draws, at what place,
# in which style. snapshot_epochs(20) = 1 and 4 evenly spaced epochs = [1, 5, 10, 15, 20]; up to 13:
# 13 * k / 4 rounded = 3, 6, 10, 13 (6.5 rounds to even).
SNAPSHOTS = {None: [1, 5, 10, 15, 20], 13: [1, 3, 6, 10, 13]}
LAYERS = ["1", "2", "output"]


def _test_histories(runs: int) -> list[pd.DataFrame]:
    """Run 0 has a zero norm (layer 2 at epoch 10), run 1 a repeated epoch row (6), run 2 no epoch 10,
    run 3 stopped after epoch 4."""
    histories = [_history(20, seed) for seed in range(runs)]
    histories[0].loc[9, "grad_norm_2"] = 0.0
    if runs > 1:
        histories[1] = pd.concat([histories[1].iloc[:6], histories[1].iloc[5:6], histories[1].iloc[6:]], ignore_index=True)
    if runs > 2:
        histories[2] = histories[2][histories[2]["epoch"] != 10].reset_index(drop=True)
    if runs > 3:
        histories[3] = histories[3].iloc[:4]
    return histories


def _drawn_epochs(run: int, epoch: int | None) -> list[int]:
    epochs = SNAPSHOTS[epoch]
    if run == 2:
        return [e for e in epochs if e != 10]  # no row for epoch 10: no line
    if run == 3:
        return [e for e in epochs if e <= 4]  # stopped: only the epochs it reached
    return epochs


@pytest.mark.parametrize("epoch", [None, 13])
@pytest.mark.parametrize("runs", range(1, 7))
def test_layer_spec_draws_each_run_s_snapshots_on_its_panel(runs, epoch):
    """1 to 6 runs (one and two rows of panels, empty cells)."""
    histories = _test_histories(runs)
    labels = [f"run {k}" for k in range(runs)]
    fig = go.Figure(layer_norm_figure_spec(histories, labels, epoch=epoch))  # validates every property
    per_row = min(3, runs)
    rows = -(-runs // per_row)
    grid = make_subplots(rows=rows, cols=per_row, shared_yaxes="all")  # plotly's own axis naming
    traces = iter(fig.data)
    colour_of: dict[int, str] = {}
    for run, history in enumerate(histories):
        panel = grid.get_subplot(run // per_row + 1, run % per_row + 1)
        for when in _drawn_epochs(run, epoch):
            trace = next(traces)
            name = "epoch 1 (initialisation)" if when == 1 else f"epoch {when}"
            norms = history.loc[history["epoch"] == when, ["grad_norm_1", "grad_norm_2", "grad_norm_output"]].iloc[0]
            assert (trace.name, list(trace.x)) == (name, LAYERS)
            assert (trace.xaxis, trace.yaxis) == (panel.xaxis.plotly_name.replace("axis", ""), panel.yaxis.plotly_name.replace("axis", ""))
            expected_y = [np.nan if v == 0 else v for v in norms.to_numpy(float)]
            np.testing.assert_array_equal(np.asarray(trace.y, dtype=float), expected_y)
            assert list(trace.text) == [
                f"run {run}, {name}<br>layer {n}: " + (f"{v:.3g}" if v > 0 else "0 (no gradient)") for n, v in zip(LAYERS, norms, strict=True)
            ]
            assert trace.showlegend == (when not in colour_of)  # the legend names each epoch once
            assert (trace.line.dash, trace.line.width) == (("solid", 2.5) if when == 1 else ("dot", 1.5))
            assert colour_of.setdefault(when, trace.line.color) == trace.line.color  # one colour per epoch
    assert next(traces, None) is None
    assert len(set(colour_of.values())) == len(colour_of)
    if epoch is None:
        assert "0 (no gradient)" in fig.data[2].text[1] and np.isnan(fig.data[2].y[1])  # run 0, epoch 10, layer 2
    assert fig.layout.height == 300 * rows + 80
    assert all(fig.layout[name].type == "log" for name in fig.layout if name.startswith("yaxis"))
    assert all(fig.layout[name].type == "category" for name in fig.layout if name.startswith("xaxis"))


@pytest.mark.parametrize("log_y", [False, True])
def test_loss_spec_draws_one_line_per_run_with_its_losses(log_y):
    histories = [_history(12, 0), _history(5, 1), _history(0, 2)]
    fig = go.Figure(loss_figure_spec(histories, ["a", "b", "empty"], log_y=log_y))  # validates every property
    assert [(t.name, t.mode) for t in fig.data] == [("a", "lines"), ("b", "lines"), ("empty", "lines")]
    for trace, history in zip(fig.data[:2], histories, strict=False):
        np.testing.assert_array_equal(np.asarray(trace.x), np.arange(1, len(history) + 1))
        np.testing.assert_array_equal(np.asarray(trace.y), history["loss"].to_numpy())
        assert trace.hovertemplate == f"{trace.name}<br>epoch %{{x}}<br>loss %{{y:.4g}}<extra></extra>"
    assert len(fig.data[2].x) == len(fig.data[2].y) == 0  # a run with no epoch yet: an empty line
    assert len({t.line.color for t in fig.data}) == 3
    assert (fig.layout.xaxis.title.text, fig.layout.yaxis.title.text) == ("epoch", "loss (log scale)" if log_y else "loss")
    assert fig.layout.yaxis.type == ("log" if log_y else "linear")
    assert (fig.layout.height, fig.layout.uirevision, fig.layout.legend.orientation) == (360, "loss", "h")
