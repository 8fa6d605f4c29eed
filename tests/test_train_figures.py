"""The live-training figures are built as plain specs (no plotly validation on the server thread):
each spec must still be a valid plotly figure, with what the validated construction would give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from explorer.train_figures import layer_norm_figure_spec, loss_figure_spec


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
    fifth = [t for t in fig.data if t.hovertext is None and t.text[0].startswith("run 4,")]
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
