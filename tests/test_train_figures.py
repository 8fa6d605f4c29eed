"""The live-training figures are built as plain specs (no plotly validation on the server thread):
each spec must still be a valid plotly figure, with what the validated construction would give."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from explorer.train.figures import (
    MAX_PANELS_PER_ROW,
    SNAPSHOT_COLOURS,
    TEMPLATE,
    layer_norm_figure_spec,
    loss_figure_spec,
    run_colour,
    snapshot_epochs,
)


# -- the validated constructions these specs replaced (explorer/train_figures.py before issue 15's
# second round), kept here verbatim as the reference: a spec must give the same figure ------------------
def reference_loss_figure(histories: Sequence[pd.DataFrame], labels: Sequence[str], *, log_y: bool = False, metric: str = "loss") -> go.Figure:
    """One line per run: ``metric`` against epoch."""
    if len(histories) != len(labels):
        raise ValueError(f"got {len(histories)} histories but {len(labels)} labels")
    fig = go.Figure()
    for index, (history, label) in enumerate(zip(histories, labels, strict=True)):
        fig.add_trace(
            go.Scatter(
                x=history["epoch"].to_numpy() if len(history) else [],
                y=history[metric].to_numpy() if len(history) else [],
                mode="lines",
                name=label,
                line={"color": run_colour(index), "width": 2},
                hovertemplate=f"{label}<br>epoch %{{x}}<br>{metric} %{{y:.4g}}<extra></extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        height=360,
        margin={"l": 60, "r": 20, "t": 30, "b": 50},
        xaxis_title="epoch",
        yaxis_title=metric + (" (log scale)" if log_y else ""),
        legend={"orientation": "h", "y": -0.2},
        uirevision="loss",  # keep zoom while the chart updates live
    )
    fig.update_yaxes(type="log" if log_y else "linear")
    return fig


def reference_layer_norm_figure(histories: Sequence[pd.DataFrame], labels: Sequence[str], *, epoch: int | None = None) -> go.Figure:
    """Gradient flow through depth, one panel per run: the kernel gradient norm of every layer (hidden
    layers 1..D, then the output layer) against its index, log scale, at epoch 1 (initialisation:
    history rows describe the weights an epoch starts from) and at evenly spaced epochs up to ``epoch``
    (default: the latest epoch of any run). One colour per epoch, the same in every panel, so the
    legend names each once. A run that stopped earlier (diverged) draws only the epochs it reached.
    A zero norm (no gradient, e.g. the true gradient of a step) cannot sit on a log axis: it is a gap
    in the line, named in the hover text."""
    if len(histories) != len(labels):
        raise ValueError(f"got {len(histories)} histories but {len(labels)} labels")
    latest = max((int(h["epoch"].iloc[-1]) for h in histories if len(h)), default=0)
    epochs = snapshot_epochs(latest if epoch is None else min(int(epoch), latest))
    columns_of = [[c for c in h.columns if c.startswith("grad_norm_")] for h in histories]
    panels = max(1, len(histories))
    per_row = min(MAX_PANELS_PER_ROW, panels)
    rows = math.ceil(panels / per_row)
    titles = [f"<span style='color:{run_colour(i)}'>■</span> {label}" for i, label in enumerate(labels)]
    fig = make_subplots(
        rows=rows, cols=per_row, subplot_titles=titles or None, shared_yaxes="all",
        horizontal_spacing=0.04, vertical_spacing=0.18 if rows > 1 else 0.1,
    )
    shown_in_legend: set[int] = set()
    for index, (history, label, columns) in enumerate(zip(histories, labels, columns_of, strict=True)):
        if not len(history) or not columns:
            continue
        names = [c.removeprefix("grad_norm_") for c in columns]
        row, col = divmod(index, per_row)
        reached = history["epoch"].to_numpy()
        for order, when in enumerate(epochs):
            if when > reached[-1]:
                break
            values = history.loc[history["epoch"] == when, columns]
            if not len(values):
                continue
            norms = values.iloc[0].to_numpy(dtype=float)
            name = "epoch 1 (initialisation)" if when == 1 else f"epoch {when}"
            hover = [
                f"{label}, {name}<br>layer {n}: " + (f"{v:.3g}" if v > 0 else "0 (no gradient)")
                for n, v in zip(names, norms, strict=True)
            ]
            fig.add_trace(
                go.Scatter(
                    x=names,
                    y=np.where(norms > 0, norms, np.nan),
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=order not in shown_in_legend,
                    line={"color": SNAPSHOT_COLOURS[order % len(SNAPSHOT_COLOURS)], "width": 2.5 if when == 1 else 1.5,
                          "dash": "solid" if when == 1 else "dot"},
                    marker={"size": 6},
                    text=hover,
                    hovertemplate="%{text}<extra></extra>",
                ),
                row=row + 1,
                col=col + 1,
            )
            shown_in_legend.add(order)
    fig.update_layout(
        template=TEMPLATE,
        height=300 * rows + 80,
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        legend={"orientation": "h", "y": -0.12 if rows > 1 else -0.25, "title": {"text": "colour = epoch "}},
        uirevision="layers",
    )
    fig.update_xaxes(type="category", title_text="layer (1 = first hidden)")
    fig.update_yaxes(type="log", exponentformat="power")
    fig.update_yaxes(title_text="kernel gradient norm", col=1)
    return fig



def _json_without_margins(figure: go.Figure) -> dict:
    """The figure's JSON minus the margins (changed on purpose, see figures.MARGIN)."""
    data = figure.to_plotly_json()
    data["layout"].pop("margin", None)
    return data


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


@pytest.mark.parametrize("runs", range(1, 7))
def test_layer_spec_is_the_validated_figure_it_replaced(runs):
    """1 to 6 runs (one and two rows of panels, empty cells); one run with a repeated epoch row, one with
    an epoch missing, one that stopped early, one with a zero norm."""
    histories = [_history(20, seed) for seed in range(runs)]
    histories[0].loc[7, "grad_norm_2"] = 0.0
    if runs > 1:
        histories[1] = pd.concat([histories[1].iloc[:6], histories[1].iloc[5:6], histories[1].iloc[6:]], ignore_index=True)
    if runs > 2:
        histories[2] = histories[2][histories[2]["epoch"] != 10].reset_index(drop=True)
    if runs > 3:
        histories[3] = histories[3].iloc[:4]
    labels = [f"run {k}" for k in range(runs)]
    for epoch in (None, 13):
        expected = reference_layer_norm_figure(histories, labels, epoch=epoch)
        actual = go.Figure(layer_norm_figure_spec(histories, labels, epoch=epoch))
        assert _json_without_margins(actual) == _json_without_margins(expected)


@pytest.mark.parametrize("log_y", [False, True])
def test_loss_spec_is_the_validated_figure_it_replaced(log_y):
    histories = [_history(12, 0), _history(5, 1), _history(0, 2)]
    expected = reference_loss_figure(histories, ["a", "b", "empty"], log_y=log_y)
    actual = go.Figure(loss_figure_spec(histories, ["a", "b", "empty"], log_y=log_y))
    assert _json_without_margins(actual) == _json_without_margins(expected)
