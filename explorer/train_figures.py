"""Figures of the train view: loss curves of several runs, decision boundaries, fitted curves.

Pure functions returning ``plotly.graph_objects.Figure``. Every run keeps one colour in every
figure, and prediction panels share one colour scale so runs compare at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.figures import COMPARE_COLOURS
from explorer.tasks import Dataset
from explorer.train import GridPrediction

TEMPLATE = "plotly_white"
CLASS_COLOURS = ("#D55E00", "#0072B2")  # class 0, class 1 (Okabe-Ito vermillion, blue)
PROBABILITY_SCALE = [[0.0, "#F4C7B0"], [0.5, "#FFFFFF"], [1.0, "#B5D3EA"]]


def run_colour(index: int) -> str:
    return COMPARE_COLOURS[index % len(COMPARE_COLOURS)]


def loss_figure(histories: Sequence[pd.DataFrame], labels: Sequence[str], *, log_y: bool = False, metric: str = "loss") -> go.Figure:
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


def prediction_figure(predictions: Sequence[GridPrediction], labels: Sequence[str], dataset: Dataset) -> go.Figure:
    """Per run: the decision boundary (2-D tasks) or the fitted curve (1-D tasks), with the data."""
    if len(predictions) != len(labels):
        raise ValueError(f"got {len(predictions)} predictions but {len(labels)} labels")
    count = max(1, len(predictions))
    columns = min(count, 3)
    rows = -(-count // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=list(labels), horizontal_spacing=0.06, vertical_spacing=0.12)
    if dataset.input_dim == 2:
        _boundaries(fig, predictions, dataset, columns)
    else:
        _curves(fig, predictions, dataset, columns)
    fig.update_layout(
        template=TEMPLATE,
        height=330 * rows + 80,
        margin={"l": 40, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h", "y": -0.12},
    )
    return fig


def _cell(index: int, columns: int) -> dict[str, int]:
    return {"row": index // columns + 1, "col": index % columns + 1}


def _boundaries(fig: go.Figure, predictions: Sequence[GridPrediction], dataset: Dataset, columns: int) -> None:
    labels = dataset.y.astype(int)
    for index, prediction in enumerate(predictions):
        cell = _cell(index, columns)
        fig.add_trace(
            go.Heatmap(
                x=prediction.x,
                y=prediction.y,
                z=prediction.values,
                zmin=0.0,
                zmax=1.0,
                colorscale=PROBABILITY_SCALE,
                showscale=index == 0,
                colorbar={"title": {"text": "P(class 1)"}, "len": 0.8},
                hovertemplate="x1 %{x:.2f}<br>x2 %{y:.2f}<br>P(class 1) %{z:.2f}<extra></extra>",
            ),
            **cell,
        )
        fig.add_trace(
            go.Contour(
                x=prediction.x,
                y=prediction.y,
                z=prediction.values,
                contours={"start": 0.5, "end": 0.5, "size": 1, "coloring": "none"},
                line={"color": "#1F2430", "width": 2},
                showscale=False,
                hoverinfo="skip",
                name="decision boundary (P = 0.5)",
                showlegend=index == 0,
            ),
            **cell,
        )
        for label in (0, 1):
            chosen = labels == label
            fig.add_trace(
                go.Scattergl(
                    x=dataset.x[chosen, 0],
                    y=dataset.x[chosen, 1],
                    mode="markers",
                    marker={"color": CLASS_COLOURS[label], "size": 4, "line": {"width": 0.5, "color": "white"}},
                    name=f"class {label}",
                    legendgroup=f"class {label}",
                    showlegend=index == 0,
                    hoverinfo="skip",
                ),
                **cell,
            )


def _curves(fig: go.Figure, predictions: Sequence[GridPrediction], dataset: Dataset, columns: int) -> None:
    targets = dataset.y
    values = [p.values for p in predictions]
    low = float(min([targets.min(), *(np.nanmin(v) for v in values)]))
    high = float(max([targets.max(), *(np.nanmax(v) for v in values)]))
    margin = 0.05 * (high - low or 1.0)
    for index, prediction in enumerate(predictions):
        cell = _cell(index, columns)
        fig.add_trace(
            go.Scattergl(
                x=dataset.x[:, 0],
                y=targets,
                mode="markers",
                marker={"color": "#9AA0AC", "size": 3},
                name="data",
                showlegend=index == 0,
                hoverinfo="skip",
            ),
            **cell,
        )
        fig.add_trace(
            go.Scatter(
                x=prediction.x,
                y=prediction.values,
                mode="lines",
                line={"color": run_colour(index), "width": 2.5},
                name="fitted curve",
                showlegend=index == 0,
            ),
            **cell,
        )
        fig.update_yaxes(range=[low - margin, high + margin], **cell)


def layer_norm_figure(histories: Sequence[pd.DataFrame], labels: Sequence[str], *, epoch: int | None = None) -> go.Figure:
    """Gradient flow through depth: per run, the kernel gradient norm of every layer (hidden layers
    1..D, then the output layer) against its index, log scale. Solid: at initialisation (history row 1);
    dashed: at ``epoch`` (default: each run's last row). A zero norm (no gradient, e.g. the true gradient
    of a step) cannot sit on a log axis: it is left out of the line and named in the hover text."""
    if len(histories) != len(labels):
        raise ValueError(f"got {len(histories)} histories but {len(labels)} labels")
    fig = go.Figure()
    names: list[str] = []
    for index, (history, label) in enumerate(zip(histories, labels, strict=True)):
        columns = [c for c in history.columns if c.startswith("grad_norm_")]
        if not len(history) or not columns:
            continue
        names = [c.removeprefix("grad_norm_") for c in columns]
        later = history.iloc[-1] if epoch is None else history[history["epoch"] <= epoch].iloc[-1]
        snapshots = [(history.iloc[0], "at initialisation", "solid")]
        if int(later["epoch"]) != int(history["epoch"].iloc[0]):
            snapshots.append((later, f"epoch {int(later['epoch'])}", "dash"))
        for row, when, dash in snapshots:
            norms = np.array([float(row[c]) for c in columns])
            shown = np.where(norms > 0, norms, np.nan)
            hover = [f"{label}, {when}<br>layer {n}: " + (f"{v:.3g}" if v > 0 else "0 (no gradient)") for n, v in zip(names, norms, strict=True)]
            fig.add_trace(
                go.Scatter(
                    x=names,
                    y=shown,
                    mode="lines+markers",
                    name=f"{label} ({when})",
                    line={"color": run_colour(index), "width": 2, "dash": dash},
                    marker={"size": 7},
                    text=hover,
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    fig.update_layout(
        template=TEMPLATE,
        height=380,
        margin={"l": 60, "r": 20, "t": 30, "b": 50},
        xaxis_title="layer (1 = first hidden layer)",
        yaxis_title="kernel gradient norm (log scale)",
        legend={"orientation": "h", "y": -0.25},
        uirevision="layers",
    )
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=names)
    fig.update_yaxes(type="log", exponentformat="power")
    return fig
