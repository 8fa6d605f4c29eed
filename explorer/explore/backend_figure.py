"""The figure of one custom gradient on several Keras backends: :func:`backends_figure` (a pure function).

Two panels, forward and custom gradient, each backend's curve drawn over TensorFlow's (TensorFlow a wide solid
line, the others narrower and dashed, so a backend that agrees lies on it and one that differs shows beside it);
the inputs where a backend differs are shaded, and the ``backends`` verdict is the title. A backend that raised
has no curve: its error is in the legend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.explore import detect

BACKEND_COLOURS = {"tensorflow": "#1F2430", "jax": "#0072B2", "torch": "#D55E00"}
BACKEND_DASH = {"tensorflow": "solid", "jax": "dash", "torch": "dot"}
BACKEND_WIDTH = {"tensorflow": 5.0, "jax": 2.5, "torch": 2.5}
DIFFER_FILL = "rgba(213, 94, 0, 0.18)"
DIFFER_LABEL = "backends differ here"
MAX_SHADED = 40  # more runs than this: one region from the first to the last


def _wrapped(text: str, width: int = 110) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if len(line) + len(word) + 1 > width and line:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return "<br>".join(lines[:3]) + (" ..." if len(lines) > 3 else "")


def backends_figure(
    x: np.ndarray, curves: Mapping[str, Mapping[str, Any]], differs: np.ndarray, verdict: str, title: str = ""
) -> go.Figure:
    """``curves``: backend -> ``{"forward": array, "gradient": array}`` or ``{"error": text}``; ``differs``: a
    boolean mask over ``x``; ``verdict``: the ``backends`` row's level and message."""
    figure = make_subplots(rows=1, cols=2, subplot_titles=("Forward", "Custom gradient (upstream 1)"))
    for backend, curve in curves.items():
        colour = BACKEND_COLOURS.get(backend, "#999999")
        if "error" in curve:
            figure.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"{backend}: {curve['error'][:80]}",
                                        line={"color": colour, "dash": BACKEND_DASH.get(backend, "dash")}),
                             row=1, col=1)
            continue
        for col, key in ((1, "forward"), (2, "gradient")):
            values = curve.get(key)
            if values is None or np.shape(values) != np.shape(x):
                continue
            figure.add_trace(
                go.Scatter(
                    x=x, y=np.asarray(values, np.float64), mode="lines", name=backend, legendgroup=backend,
                    showlegend=col == 1,
                    line={"color": colour, "dash": BACKEND_DASH.get(backend, "dash"),
                          "width": BACKEND_WIDTH.get(backend, 2.5)},
                ),
                row=1, col=col,
            )
    runs = detect.runs(np.asarray(differs, bool))
    if len(runs) > MAX_SHADED:
        runs = [(runs[0][0], runs[-1][1])]
    step = float(x[1] - x[0]) if len(x) > 1 else 1.0
    for number, (start, end) in enumerate(runs):
        for col in (1, 2):
            figure.add_vrect(x0=float(x[start]) - step / 2, x1=float(x[end]) + step / 2, fillcolor=DIFFER_FILL,
                             line_width=0, layer="below", row=1, col=col)
        if number == 0:  # one legend entry for the shading
            figure.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=DIFFER_LABEL,
                                        marker={"color": DIFFER_FILL, "size": 14, "symbol": "square"}), row=1, col=1)
    heading = f"{title}: " if title else ""
    figure.update_layout(
        title={"text": f"{heading}{_wrapped(verdict)}", "font": {"size": 13}},
        height=480, margin={"l": 60, "r": 24, "t": 110, "b": 90},
        legend={"orientation": "h", "y": -0.18}, plot_bgcolor="white",
    )
    figure.update_xaxes(title_text="x", gridcolor="#EEEEEE")
    figure.update_yaxes(gridcolor="#EEEEEE")
    return figure
