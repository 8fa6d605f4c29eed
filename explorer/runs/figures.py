"""Figures of a recorded run: pure functions from the rows a page read to figure specs (plain dicts, as
:mod:`explorer.explore.figures`; wrap one in :func:`explorer.explore.figure_layout.as_figure` for a Figure).

* :func:`layer_figure_spec`: the Explore figure of a layer's op with the histogram of the layer's real inputs
  behind every panel, the clip boundaries marked and the shares written on it;
* :func:`over_steps_spec`: the shares, the mismatch and the firing rate or flip ratio over steps;
* :func:`gradient_depth_spec`: the gradient norm against depth at a step, and over steps per layer;
* :func:`loss_spec`: the loss;
* :func:`compare_spec`: several runs on one axis, one layer, aligned by step;
* :func:`what_if_spec`: the histogram with ``|g|`` of the recorded and the what-if backward over it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from explorer.explore import figures as explore_figures
from explorer.explore.figure_layout import AXIS_STYLE, base_layout, panels_layout
from explorer.explore.sweeps import Sweep
from explorer.runs.what_if import Histogram, WhatIf

HISTOGRAM_COLOUR = "#7F7F7F"
HISTOGRAM_OPACITY = 0.28
HISTOGRAM_HEIGHT = 0.85  # the tallest bin reaches this share of its panel's height
SHARE_COLUMNS = {
    "zero_grad_share": ("zero gradient", "#D55E00"),
    "special_share": ("on a special point", "#CC79A7"),
    "below_share": ("below the lower boundary", "#0072B2"),
    "above_share": ("above the upper boundary", "#009E73"),
}
RUN_COLOURS = explore_figures.COMPARE_COLOURS
STEP_MARK_COLOUR = "#1F2430"


def _percent(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.3g} %"


def shares_text(row: Mapping[str, float], separator: str = " · ") -> str:
    """The shares of one ``layers`` row as a line: "zero gradient 12.5 % · on a special point 0 % · ..." (a share
    that is NaN, an op without that boundary, is left out); ``separator`` between them."""
    parts = []
    for column, (label, _) in SHARE_COLUMNS.items():
        value = row.get(column)
        if value is not None and math.isfinite(float(value)):
            parts.append(f"{label} {_percent(float(value))}")
    return separator.join(parts)


def _histogram_bars(histogram: Histogram, axis_suffix: str, y_range: Sequence[float], showlegend: bool, step: int) -> dict:
    """The histogram as bars scaled into the panel's y range (their hover gives the real counts)."""
    counts = histogram.counts.astype(np.float64)
    low, high = float(y_range[0]), float(y_range[1])
    top = counts.max() if counts.size and counts.max() > 0 else 1.0
    heights = counts / top * HISTOGRAM_HEIGHT * (high - low)
    total = max(histogram.total, 1)
    edges = histogram.edges
    text = [
        f"x in [{edges[i]:.4g}, {edges[i + 1]:.4g}): {int(c):,} inputs ({100 * c / total:.3g} %)"
        for i, c in enumerate(histogram.counts.tolist())
    ]
    return {
        "type": "bar", "x": histogram.centres, "y": heights, "base": np.full(counts.size, low),
        "width": float(edges[1] - edges[0]), "marker": {"color": HISTOGRAM_COLOUR, "line": {"width": 0}},
        "opacity": HISTOGRAM_OPACITY, "name": f"layer inputs at step {step} (histogram, bar heights scaled)",
        "legendgroup": "histogram", "showlegend": showlegend, "text": text, "textposition": "none",
        "hovertemplate": "%{text}<extra></extra>", "xaxis": f"x{axis_suffix}", "yaxis": f"y{axis_suffix}",
    }  # fmt: skip


def layer_figure_spec(
    result: Sweep,
    points: pd.DataFrame | None,
    histogram: Histogram,
    row: Mapping[str, float],
    *,
    step: int,
    layer: str,
    clip_bounds: Sequence[float | None] | None = None,
) -> dict:
    """The Explore figure of ``result`` (the layer's op at its parameters over the histogram's range) with the
    histogram of the layer's inputs at ``step`` behind each panel, each clip boundary of ``clip_bounds`` marked by
    a dashed line in every panel, and the shares of ``row`` (the ``layers`` row of that layer and step) written
    over the custom-gradient panel."""
    spec = explore_figures.main_figure_spec(result, points, title=f"{layer} at step {step:,}: {result.title}")
    layout = spec["layout"]
    panels = sorted(int(name[5:] or 1) for name in layout if name.startswith("yaxis"))
    bars = []
    for index, panel in enumerate(panels):
        suffix = "" if panel == 1 else str(panel)
        y_range = layout[f"yaxis{suffix}"].get("range", [0.0, 1.0])
        bars.append(_histogram_bars(histogram, suffix, y_range, showlegend=index == 0, step=step))
    shapes = list(layout.get("shapes", []))
    annotations = list(layout.get("annotations", []))
    for bound, side in zip(clip_bounds or (), ("lower", "upper"), strict=False):
        if bound is None or not math.isfinite(float(bound)):
            continue
        for panel in panels:
            suffix = "" if panel == 1 else str(panel)
            shapes.append({
                "type": "line", "xref": f"x{suffix}", "yref": f"y{suffix} domain", "x0": float(bound), "x1": float(bound),
                "y0": 0.0, "y1": 1.0, "line": {"color": explore_figures.KIND_COLOURS["boundary"], "width": 2, "dash": "dash"},
            })  # fmt: skip
        annotations.append({
            "xref": f"x{panels[-1] if panels[-1] > 1 else ''}", "yref": "paper", "x": float(bound), "y": -0.02,
            "text": f"{side} clip {float(bound):g}", "showarrow": False, "yanchor": "top", "font": {"size": 11},
        })  # fmt: skip
    last = "" if panels[-1] == 1 else str(panels[-1])
    text = shares_text(row, "<br>")  # one share per line: the panel is a third of the figure wide
    outside = histogram.underflow + histogram.overflow
    if outside:
        text += f"<br>{outside:,} of {histogram.total:,} inputs outside [{histogram.lo:g}, {histogram.hi:g}] (not drawn)"
    if text:
        annotations.append({
            "xref": f"x{last} domain", "yref": f"y{last} domain", "x": 0.01, "y": 0.99, "xanchor": "left",
            "yanchor": "top", "showarrow": False, "align": "left", "text": text, "font": {"size": 11},
            "bgcolor": "rgba(255,255,255,0.8)",
        })  # fmt: skip
    layout["shapes"], layout["annotations"] = shapes, annotations
    layout["barmode"] = "overlay"
    return {"data": bars + spec["data"], "layout": layout}


def _step_line(step: int | None, axis: str = "x") -> list[dict]:
    if step is None:
        return []
    return [{
        "type": "line", "xref": axis, "yref": f"y{axis[1:]} domain", "x0": step, "x1": step, "y0": 0, "y1": 1,
        "line": {"color": STEP_MARK_COLOUR, "width": 1, "dash": "dot"},
    }]  # fmt: skip


def _line(x, y, name: str, colour: str, axis: str = "", group: str | None = None, showlegend: bool = True) -> dict:
    return {
        "type": "scatter", "mode": "lines", "x": np.asarray(x, dtype=np.float64), "y": np.asarray(y, dtype=np.float64),
        "name": name, "line": {"color": colour, "width": 2}, "legendgroup": group or name, "showlegend": showlegend,
        "xaxis": f"x{axis}", "yaxis": f"y{axis}",
    }  # fmt: skip


def _has_values(frame: pd.DataFrame, column: str) -> bool:
    return column in frame and bool(np.isfinite(pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)).any())


def over_steps_spec(frame: pd.DataFrame, *, layer: str, step: int | None = None) -> dict:
    """Three panels over steps for one layer: its shares (zero gradient, on a special point, beyond each
    boundary), the mismatch (cosine and norm ratio of the weight gradients, custom against reference) and the
    firing rate (spike ops) or flip ratio (sign ops); ``frame`` holds the layer's rows (``step`` and those
    columns), ``step`` is marked by a dotted line."""
    layout = base_layout(f"{layer} over steps", "shares of the layer's inputs · mismatch with the reference backward · activity")
    panels_layout(layout, ["Shares of inputs", "Mismatch (weight gradients)", "Firing rate / flip ratio"], 0.07)
    steps = frame["step"].to_numpy(dtype=np.float64) if "step" in frame else np.zeros(0)
    data = []
    for column, (label, colour) in SHARE_COLUMNS.items():
        if _has_values(frame, column):
            data.append(_line(steps, frame[column], label, colour))
    mismatch = {"mismatch_cosine": ("cosine (1: same direction)", "#1F2430"),
                "mismatch_norm_ratio": ("norm ratio (custom / reference)", "#E69F00")}  # fmt: skip
    for column, (label, colour) in mismatch.items():
        if _has_values(frame, column):
            data.append(_line(steps, frame[column], label, colour, "2"))
    for column, label, colour in (("firing_rate", "firing rate", "#009E73"), ("flip_ratio", "flip ratio", "#CC79A7")):
        if _has_values(frame, column):
            data.append(_line(steps, frame[column], label, colour, "3"))
    for panel, title in (("", "share"), ("2", "cosine, ratio"), ("3", "share")):
        layout[f"xaxis{panel}"]["title"] = {"text": "step"}
        layout[f"yaxis{panel}"]["title"] = {"text": title}
    layout["yaxis"]["range"] = [0.0, 1.0]
    layout["yaxis3"]["range"] = [0.0, 1.0]
    layout["shapes"] = [shape for panel in ("x", "x2", "x3") for shape in _step_line(step, panel)]
    return {"data": data, "layout": layout}


def gradient_depth_spec(at_step: pd.DataFrame, over_steps: pd.DataFrame, *, step: int) -> dict:
    """Left: the gradient norm reaching each watched layer against its depth at ``step`` (``at_step``: ``layer``,
    ``depth``, ``grad_norm``). Right: each layer's gradient norm over steps (``over_steps``: ``step``, ``layer``,
    ``depth``, ``grad_norm``), log scale, ``step`` marked."""
    layout = base_layout(f"Gradient norm against depth at step {step:,}", "L2 norm of the loss gradient reaching each watched layer's input, on the probe batch")
    panels_layout(layout, [f"At step {step:,}", "Over steps (log scale)"], 0.1)
    layout["xaxis2"].pop("matches", None)  # depth on the left, steps on the right
    ordered = at_step.sort_values("depth") if len(at_step) else at_step
    data = [{
        "type": "scatter", "mode": "lines+markers", "x": ordered["depth"].to_numpy(dtype=np.float64) if len(ordered) else [],
        "y": ordered["grad_norm"].to_numpy(dtype=np.float64) if len(ordered) else [], "name": f"step {step:,}",
        "text": ordered["layer"].astype(str).tolist() if len(ordered) else [], "line": {"color": "#0072B2", "width": 2},
        "hovertemplate": "%{text} (depth %{x}): %{y:.4g}<extra></extra>", "xaxis": "x", "yaxis": "y",
    }]  # fmt: skip
    if len(over_steps):
        ordered_rows = over_steps.sort_values(["depth", "step"], kind="stable")
        layer_names = ordered_rows["layer"].to_numpy()
        steps, norms = ordered_rows["step"].to_numpy(dtype=np.float64), ordered_rows["grad_norm"].to_numpy(dtype=np.float64)
        starts = np.flatnonzero(np.r_[True, layer_names[1:] != layer_names[:-1]])
        for index, (a, b) in enumerate(zip(starts, np.r_[starts[1:], len(layer_names)], strict=True)):
            name = str(layer_names[a])
            colour = RUN_COLOURS[index % len(RUN_COLOURS)]
            data.append(_line(steps[a:b], norms[a:b], name, colour, "2", group=f"layer-{name}"))
    layout["xaxis"]["title"] = {"text": "depth (0 = first watched layer)"}
    layout["xaxis"]["dtick"] = 1
    layout["xaxis2"]["title"] = {"text": "step"}
    layout["yaxis"]["title"] = {"text": "gradient norm"}
    layout["yaxis2"]["type"] = "log"
    layout["shapes"] = _step_line(step, "x2")
    return {"data": data, "layout": layout}


def loss_spec(steps: pd.DataFrame, *, step: int | None = None, title: str = "Loss") -> dict:
    """The loss over steps (``steps``: ``step``, ``loss``), ``step`` marked."""
    layout = base_layout(title, "the training loss at each recorded step")
    layout["height"] = 320
    layout["xaxis"] = {**AXIS_STYLE, "title": {"text": "step"}}
    layout["yaxis"] = {**AXIS_STYLE, "title": {"text": "loss"}}
    data = [_line(steps["step"], steps["loss"], "loss", "#1F2430")] if len(steps) else []
    layout["shapes"] = _step_line(step)
    return {"data": data, "layout": layout}


def compare_spec(runs: Sequence[tuple[str, pd.DataFrame, pd.DataFrame]], *, depth: int) -> dict:
    """Several runs on one axis, aligned by step, for the watched layer at ``depth`` in each: its zero-gradient
    share, its gradient norm, and each run's loss. ``runs``: (label, the layer's rows with ``step``,
    ``zero_grad_share``, ``grad_norm``; the run's ``steps`` rows with ``step``, ``loss``)."""
    layout = base_layout(f"Runs compared: watched layer at depth {depth}", "one colour per run, aligned by step")
    panels_layout(layout, ["Zero-gradient share", "Gradient norm (log scale)", "Loss"], 0.07)
    data = []
    for index, (label, layer_rows, step_rows) in enumerate(runs):
        colour = RUN_COLOURS[index % len(RUN_COLOURS)]
        group = f"run-{index}"
        if len(layer_rows):
            data.append(_line(layer_rows["step"], layer_rows["zero_grad_share"], label, colour, "", group))
            data.append(_line(layer_rows["step"], layer_rows["grad_norm"], label, colour, "2", group, showlegend=False))
        if len(step_rows):
            data.append(_line(step_rows["step"], step_rows["loss"], label, colour, "3", group, showlegend=not len(layer_rows)))
    for panel, title in (("", "share"), ("2", "gradient norm"), ("3", "loss")):
        layout[f"xaxis{panel}"]["title"] = {"text": "step"}
        layout[f"yaxis{panel}"]["title"] = {"text": title}
    layout["yaxis2"]["type"] = "log"
    return {"data": data, "layout": layout}


def what_if_spec(histogram: Histogram, results: Sequence[WhatIf], *, step: int, layer: str) -> dict:
    """The histogram of the layer's inputs (counts, left axis) with ``|g|`` of each backward in ``results`` at the
    bin centres (right axis): the recorded one first, then the what-if."""
    layout = base_layout(
        f"What if: {layer} at step {step:,} under another backward",
        "the same recorded inputs, another custom gradient: not a new training run",
    )
    layout["xaxis"] = {**AXIS_STYLE, "title": {"text": "layer input x"}}
    layout["yaxis"] = {**AXIS_STYLE, "title": {"text": "inputs per bin"}}
    layout["yaxis2"] = {**AXIS_STYLE, "title": {"text": "|g(x)| at the bin centre"}, "overlaying": "y", "side": "right", "rangemode": "tozero"}
    edges = histogram.edges
    data = [{
        "type": "bar", "x": histogram.centres, "y": histogram.counts, "width": float(edges[1] - edges[0]),
        "marker": {"color": HISTOGRAM_COLOUR, "line": {"width": 0}}, "opacity": 0.45, "name": f"inputs at step {step:,}",
    }]  # fmt: skip
    dashes = ("solid", "dash", "dot", "dashdot")
    for index, result in enumerate(results):
        data.append({
            "type": "scatter", "mode": "lines+markers", "x": histogram.centres, "y": np.abs(result.grad),
            "name": f"|g| {result.label}: zero {_percent(result.zero_share)}, mass {result.mass:.4g}",
            "line": {"color": RUN_COLOURS[index % len(RUN_COLOURS)], "width": 2, "dash": dashes[index % len(dashes)]},
            "marker": {"size": 4}, "yaxis": "y2",
        })  # fmt: skip
    layout["barmode"] = "overlay"
    return {"data": data, "layout": layout}
