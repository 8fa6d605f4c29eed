"""Figures of the train view: loss curves of several runs, decision boundaries, fitted curves.

Pure functions returning ``plotly.graph_objects.Figure``. Every run keeps one colour in every
figure, and prediction panels share one colour scale so runs compare at a glance. The two figures
redrawn on every tick of live training also come as plain specs (``*_spec``, see
:func:`explorer.explore.figures.as_figure`): validating plotly objects cost ~55 ms a tick, per user, on the
server thread everyone's slider moves wait for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.explore.figures import COMPARE_COLOURS, as_figure, template_json
from explorer.train.tasks import Dataset
from explorer.train.trainer import GridPrediction

TEMPLATE = "plotly_white"
CLASS_COLOURS = ("#D55E00", "#0072B2")  # class 0, class 1 (Okabe-Ito vermillion, blue)
PROBABILITY_SCALE = [[0.0, "#F4C7B0"], [0.5, "#FFFFFF"], [1.0, "#B5D3EA"]]


def run_colour(index: int) -> str:
    return COMPARE_COLOURS[index % len(COMPARE_COLOURS)]


def loss_figure_spec(
    histories: Sequence[pd.DataFrame], labels: Sequence[str], *, log_y: bool = False, metric: str = "loss"
) -> dict:
    """One line per run: ``metric`` against epoch, as a figure spec."""
    if len(histories) != len(labels):
        raise ValueError(f"got {len(histories)} histories but {len(labels)} labels")
    data = [
        {
            "type": "scatter",
            "x": history["epoch"].to_numpy() if len(history) else [],
            "y": history[metric].to_numpy() if len(history) else [],
            "mode": "lines",
            "name": label,
            "line": {"color": run_colour(index), "width": 2},
            "hovertemplate": f"{label}<br>epoch %{{x}}<br>{metric} %{{y:.4g}}<extra></extra>",
        }
        for index, (history, label) in enumerate(zip(histories, labels, strict=True))
    ]
    layout = {
        "template": json.loads(template_json()),
        "height": 360,
        "margin": {"l": 84, "r": 20, "t": 30, "b": 96},  # already fits ticks and legend: see figures.MARGIN
        "xaxis": {"title": {"text": "epoch"}},
        "yaxis": {"title": {"text": metric + (" (log scale)" if log_y else "")}, "type": "log" if log_y else "linear"},
        "legend": {"orientation": "h", "y": -0.2},
        "uirevision": "loss",  # keep zoom while the chart updates live
    }
    return {"data": data, "layout": layout}


def loss_figure(histories: Sequence[pd.DataFrame], labels: Sequence[str], *, log_y: bool = False, metric: str = "loss") -> go.Figure:
    """One line per run: ``metric`` against epoch."""
    return as_figure(loss_figure_spec(histories, labels, log_y=log_y, metric=metric))


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
        margin={"l": 44, "r": 108 if dataset.input_dim == 2 else 20, "t": 50, "b": 80},  # r: the colour bar
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


LAYER_SNAPSHOTS = 5  # epochs drawn per run in the gradient-flow figure: the first, then evenly spaced
SNAPSHOT_COLOURS = ("#1F2430", "#3B528B", "#21918C", "#5EC962", "#E0B000")  # dark = early, yellow = latest
MAX_PANELS_PER_ROW = 3


def snapshot_epochs(last_epoch: int, count: int = LAYER_SNAPSHOTS) -> list[int]:
    """Epoch 1 (the weights at initialisation) and ``count - 1`` evenly spaced epochs up to ``last_epoch``."""
    if last_epoch < 1:
        return []
    spaced = (max(1, round(last_epoch * k / (count - 1))) for k in range(1, count))
    return sorted({1, *spaced})


@lru_cache(maxsize=16)
def _panel_grid(rows: int, per_row: int, titles: tuple[str, ...]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``make_subplots``' layout for a grid of panels sharing the y axis (as JSON, so callers get a
    fresh copy) and each panel's (xaxis, yaxis) trace references, row by row. Cached: building it
    validates every axis (~10 ms), and live training asks for the same grid every tick."""
    fig = make_subplots(
        rows=rows, cols=per_row, subplot_titles=list(titles) or None, shared_yaxes="all",
        horizontal_spacing=0.04, vertical_spacing=0.18 if rows > 1 else 0.1,
    )  # fmt: skip
    refs = tuple(
        (panel.xaxis.plotly_name.replace("axis", ""), panel.yaxis.plotly_name.replace("axis", ""))
        for panel in (fig.get_subplot(row + 1, col + 1) for row in range(rows) for col in range(per_row))
    )
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)  # the caller sets ours
    return json.dumps(layout), refs


def layer_norm_figure_spec(histories: Sequence[pd.DataFrame], labels: Sequence[str], *, epoch: int | None = None) -> dict:
    """Gradient flow through depth, one panel per run: the kernel gradient norm of every layer (hidden
    layers 1..D, then the output layer) against its index, log scale, at epoch 1 (initialisation:
    history rows describe the weights an epoch starts from) and at evenly spaced epochs up to ``epoch``
    (default: the latest epoch of any run). One colour per epoch, the same in every panel, so the
    legend names each once. A run that stopped earlier (diverged) draws only the epochs it reached.
    A zero norm (no gradient, e.g. the true gradient of a step) cannot sit on a log axis: it is a gap
    in the line, named in the hover text. A figure spec; :func:`layer_norm_figure` is the Figure."""
    if len(histories) != len(labels):
        raise ValueError(f"got {len(histories)} histories but {len(labels)} labels")
    latest = max((int(h["epoch"].iloc[-1]) for h in histories if len(h)), default=0)
    epochs = snapshot_epochs(latest if epoch is None else min(int(epoch), latest))
    columns_of = [[c for c in h.columns if c.startswith("grad_norm_")] for h in histories]
    panels = max(1, len(histories))
    per_row = min(MAX_PANELS_PER_ROW, panels)
    rows = math.ceil(panels / per_row)
    titles = tuple(f"<span style='color:{run_colour(i)}'>■</span> {label}" for i, label in enumerate(labels))
    grid_json, refs = _panel_grid(rows, per_row, titles)
    layout = json.loads(grid_json)
    data = []
    shown_in_legend: set[int] = set()
    for index, (history, label, columns) in enumerate(zip(histories, labels, columns_of, strict=True)):
        if not len(history) or not columns:
            continue
        names = [c.removeprefix("grad_norm_") for c in columns]
        x_ref, y_ref = refs[index]
        reached = history["epoch"].to_numpy()
        by_epoch = history.set_index("epoch")[columns]
        for order, when in enumerate(epochs):
            if when > reached[-1]:
                break
            if when not in by_epoch.index:
                continue
            norms = by_epoch.loc[[when]].iloc[0].to_numpy(dtype=float)
            name = "epoch 1 (initialisation)" if when == 1 else f"epoch {when}"
            hover = [
                f"{label}, {name}<br>layer {n}: " + (f"{v:.3g}" if v > 0 else "0 (no gradient)")
                for n, v in zip(names, norms, strict=True)
            ]
            data.append(
                {
                    "type": "scatter",
                    "x": names,
                    "y": np.where(norms > 0, norms, np.nan),
                    "mode": "lines+markers",
                    "name": name,
                    "legendgroup": name,
                    "showlegend": order not in shown_in_legend,
                    "line": {"color": SNAPSHOT_COLOURS[order % len(SNAPSHOT_COLOURS)], "width": 2.5 if when == 1 else 1.5,
                             "dash": "solid" if when == 1 else "dot"},
                    "marker": {"size": 6},
                    "text": hover,
                    "hovertemplate": "%{text}<extra></extra>",
                    "xaxis": x_ref,
                    "yaxis": y_ref,
                }
            )  # fmt: skip
            shown_in_legend.add(order)
    layout.update(
        template=json.loads(template_json()),
        height=300 * rows + 80,
        margin={"l": 88, "r": 20, "t": 40, "b": 118},  # already fits ticks and legend: see figures.MARGIN
        legend={"orientation": "h", "y": -0.12 if rows > 1 else -0.25, "title": {"text": "colour = epoch "}},
        uirevision="layers",
    )
    first_column_y = {refs[row * per_row][1] for row in range(rows)}
    for name, axis in layout.items():
        if name.startswith("xaxis"):
            axis.update(type="category", title={"text": "layer (1 = first hidden)"})
        elif name.startswith("yaxis"):
            axis.update(type="log", exponentformat="power")
            if ("y" + name.removeprefix("yaxis")) in first_column_y:
                axis["title"] = {"text": "kernel gradient norm"}
    return {"data": data, "layout": layout}


def layer_norm_figure(histories: Sequence[pd.DataFrame], labels: Sequence[str], *, epoch: int | None = None) -> go.Figure:
    """:func:`layer_norm_figure_spec` as a Figure."""
    return as_figure(layer_norm_figure_spec(histories, labels, epoch=epoch))


LEARNED_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def learned_figure_spec(histories: Sequence[pd.DataFrame], labels: Sequence[str]) -> dict:
    """The value of every learned op parameter against epoch (history columns ``learned <layer>.<name>``):
    one colour per run (as in the loss chart), one dash per parameter and layer."""
    if len(histories) != len(labels):
        raise ValueError(f"got {len(histories)} histories but {len(labels)} labels")
    data = []
    for index, (history, label) in enumerate(zip(histories, labels, strict=True)):
        columns = [column for column in history.columns if column.startswith("learned ")]
        for number, column in enumerate(columns):
            name = f"{label}: {column.removeprefix('learned ')}"
            data.append({
                "type": "scatter", "x": history["epoch"].to_numpy(), "y": history[column].to_numpy(), "mode": "lines",
                "name": name, "line": {"color": run_colour(index), "width": 2, "dash": LEARNED_DASHES[number % len(LEARNED_DASHES)]},
                "hovertemplate": f"{name}<br>epoch %{{x}}<br>value %{{y:.4g}}<extra></extra>",
            })  # fmt: skip
    layout = {
        "template": json.loads(template_json()),
        "height": 360,
        "margin": {"l": 70, "r": 20, "t": 30, "b": 96},
        "xaxis": {"title": {"text": "epoch"}},
        "yaxis": {"title": {"text": "learned parameter value"}},
        "legend": {"orientation": "h", "y": -0.2},
        "uirevision": "learned",
    }
    return {"data": data, "layout": layout}
