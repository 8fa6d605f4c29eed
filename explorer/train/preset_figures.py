"""Figures of the presets (``explorer.train.presets``): pure functions returning ``plotly.graph_objects.Figure``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.explore.figures import COMPARE_COLOURS, KIND_COLOURS
from explorer.train.figures import TEMPLATE

STE_COLOURS = {"identity": COMPARE_COLOURS[1], "relu": COMPARE_COLOURS[0], "clipped_relu": COMPARE_COLOURS[2]}


def yin2019_figure(histories: dict[str, pd.DataFrame]) -> go.Figure:
    """Loss (top) and the angle theta between w and w* (bottom) against the step, one line per STE."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=("population loss", "angle θ between w and w*"))
    for ste, history in histories.items():
        colour = STE_COLOURS.get(ste, COMPARE_COLOURS[3])
        for row, column in ((1, "loss"), (2, "theta")):
            fig.add_trace(
                go.Scatter(
                    x=history["step"], y=history[column], mode="lines", name=f"{ste} STE", legendgroup=ste,
                    showlegend=row == 1, line={"color": colour, "width": 2},
                    hovertemplate=f"{ste} STE<br>step %{{x}}<br>{column} %{{y:.4g}}<extra></extra>",
                ),
                row=row, col=1,
            )
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_yaxes(title_text="θ (rad)", tickvals=[0, math.pi / 2, math.pi], ticktext=["0", "π/2", "π"], row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(template=TEMPLATE, height=480, margin={"l": 60, "r": 20, "t": 40, "b": 50}, legend={"orientation": "h", "y": -0.15})
    return fig


def yin2019_sweep_figure(sweep: pd.DataFrame) -> go.Figure:
    """The closed-form loss over theta, and |autodiff gradient in w|; singular points (inf / NaN) marked."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss f(θ)", "|∇_w f|: autodiff vs exact"), horizontal_spacing=0.1)
    fig.add_trace(go.Scatter(x=sweep["theta"], y=sweep["loss"], mode="lines", name="loss", line={"color": COMPARE_COLOURS[6], "width": 2}), row=1, col=1)
    finite = sweep["grad_w_norm"].where(~sweep["singular"])
    fig.add_trace(go.Scatter(x=sweep["theta"], y=finite, mode="lines", name="autodiff", line={"color": COMPARE_COLOURS[0], "width": 3}), row=1, col=2)
    fig.add_trace(
        go.Scatter(x=sweep["theta"], y=sweep["exact_grad_w_norm"], mode="lines", name="exact |v'v*|/(2π|w|)",
                   line={"color": COMPARE_COLOURS[4], "width": 1.5, "dash": "dash"}),
        row=1, col=2,
    )
    singular = sweep[sweep["singular"]]
    top = float(np.nanmax(sweep["exact_grad_w_norm"])) * 1.15
    for column, y in ((1, singular["loss"]), (2, np.full(len(singular), top))):
        fig.add_trace(
            go.Scatter(
                x=singular["theta"], y=y, mode="markers", name="singular: autodiff gives inf/NaN",
                marker={"color": KIND_COLOURS["singular"], "size": 11, "symbol": "x"}, showlegend=column == 1,
                legendgroup="singular", text=[str(v) for v in singular["grad_w_norm"]],
                hovertemplate="θ = %{x:.4g}: autodiff gradient %{text}<extra></extra>",
            ),
            row=1, col=column,
        )
    for value in singular["theta"]:
        for column in (1, 2):
            fig.add_vline(x=float(value), line={"color": KIND_COLOURS["singular"], "dash": "dot"}, row=1, col=column)
    ticks = {"tickvals": [0, math.pi / 2, math.pi], "ticktext": ["0", "π/2", "π"], "title_text": "θ"}
    fig.update_xaxes(**ticks)
    fig.update_layout(template=TEMPLATE, height=360, margin={"l": 60, "r": 20, "t": 40, "b": 50}, legend={"orientation": "h", "y": -0.25})
    return fig


def dann_figure(per_seed: pd.DataFrame) -> go.Figure:
    """Target accuracy per seed, without and with gradient reversal (a line joins each seed's pair),
    and the mean with +- one standard deviation."""
    fig = go.Figure()
    columns = (("without reversal", "source_only_target_accuracy", COMPARE_COLOURS[1]),
               ("with reversal (DANN)", "dann_target_accuracy", COMPARE_COLOURS[0]))
    for seed, row in per_seed.iterrows():
        fig.add_trace(go.Scatter(
            x=[c[0] for c in columns], y=[row[c[1]] for c in columns], mode="lines", showlegend=False,
            line={"color": "#C8CCD4", "width": 1}, hoverinfo="skip", name=f"seed {seed}",
        ))
    for name, column, colour in columns:
        values = per_seed[column]
        fig.add_trace(go.Scatter(
            x=[name] * len(values), y=values, mode="markers", name=f"{name}: seeds",
            marker={"color": colour, "size": 8, "opacity": 0.7}, text=[f"seed {s}" for s in per_seed["seed"]],
            hovertemplate="%{text}: %{y:.3f}<extra></extra>",
        ))
        fig.add_trace(go.Scatter(
            x=[name], y=[values.mean()], mode="markers", name=f"{name}: mean ± std",
            marker={"color": colour, "size": 16, "symbol": "diamond", "line": {"color": "#1F2430", "width": 1}},
            error_y={"type": "data", "array": [values.std(ddof=1) if len(values) > 1 else 0.0], "color": colour, "thickness": 2},
            hovertemplate=f"mean %{{y:.3f}} ± {values.std(ddof=1) if len(values) > 1 else 0.0:.3f}<extra></extra>",
        ))
    fig.update_layout(template=TEMPLATE, height=380, margin={"l": 60, "r": 20, "t": 30, "b": 50},
                      yaxis_title="accuracy on the rotated target", legend={"orientation": "h", "y": -0.2})
    return fig


def shape_scale_figure(results: pd.DataFrame) -> go.Figure:
    """Final accuracy against steepness (log axis), one line per surrogate shape; the identity STE and
    the true gradient (no steepness) as horizontal lines."""
    fig = go.Figure()
    shaped = results[results["steepness"].notna()]
    for index, (name, group) in enumerate(shaped.groupby("surrogate", sort=False)):
        fig.add_trace(go.Scatter(
            x=group["steepness"], y=group["accuracy"], mode="lines+markers", name=name,
            line={"color": COMPARE_COLOURS[index % len(COMPARE_COLOURS)], "width": 2}, marker={"size": 8},
            hovertemplate=f"{name}<br>steepness %{{x:g}}<br>accuracy %{{y:.3f}}<extra></extra>",
        ))
    dashes = iter(("dash", "dot", "dashdot"))
    for row in results[results["steepness"].isna()].itertuples():
        fig.add_hline(y=row.accuracy, line={"color": "#1F2430", "dash": next(dashes, "dash"), "width": 1.5},
                      annotation_text=f"{row.surrogate}: {row.accuracy:.3f}", annotation_position="bottom right")
    fig.update_xaxes(type="log", title_text="steepness (slope or alpha)")
    fig.update_layout(template=TEMPLATE, height=380, margin={"l": 60, "r": 20, "t": 30, "b": 50},
                      yaxis_title="accuracy after training", legend={"orientation": "h", "y": -0.2})
    return fig


ESTIMATOR_COLOURS = {
    "exact": COMPARE_COLOURS[6], "reinforce": COMPARE_COLOURS[0], "reinforce_baseline": COMPARE_COLOURS[4],
    "ste_identity": COMPARE_COLOURS[1], "ste_sigmoid": COMPARE_COLOURS[2],
}  # fmt: skip


def ste_bias_figure(runs: pd.DataFrame, closed: pd.DataFrame) -> go.Figure:
    """q (top) and the expected loss L(q) (bottom) over SGD steps, the mean over seeds per estimator (each seed
    faint); the closed-form optimum and straight-through fixed point as dashed reference lines."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("q = σ(θ)", "expected loss L(q) = q(1-t)^p + (1-q)t^p"))  # fmt: skip
    for estimator, group in runs.groupby("estimator", sort=False):
        colour = ESTIMATOR_COLOURS.get(estimator, COMPARE_COLOURS[3])
        label = group["label"].iloc[0]
        mean = group.groupby("step", as_index=False)[["q", "loss"]].mean()
        for row, column in ((1, "q"), (2, "loss")):
            for _, seed_rows in group.groupby("seed"):
                fig.add_trace(go.Scatter(
                    x=seed_rows["step"], y=seed_rows[column], mode="lines", line={"color": colour, "width": 0.6},
                    opacity=0.25, showlegend=False, hoverinfo="skip", legendgroup=estimator, name=f"{label}: one seed",
                ), row=row, col=1)  # fmt: skip
            fig.add_trace(go.Scatter(
                x=mean["step"], y=mean[column], mode="lines", name=label, legendgroup=estimator, showlegend=row == 1,
                line={"color": colour, "width": 2.5},
                hovertemplate=f"{label}<br>step %{{x}}<br>{column} %{{y:.4f}} (mean over seeds)<extra></extra>",
            ), row=row, col=1)  # fmt: skip
    optimum, fixed = closed.iloc[0], closed.iloc[1]
    for row, column in ((1, "q"), (2, "loss")):
        for point, dash in ((optimum, "dash"), (fixed, "dot")):
            fig.add_hline(y=float(point[column]), line={"color": "#1F2430", "dash": dash, "width": 1.5}, row=row, col=1,
                          annotation_text=f"{point['point']}: {column} = {float(point[column]):.4f}",
                          annotation_position="top left" if dash == "dash" else "bottom left",
                          annotation_bgcolor="rgba(255,255,255,0.85)")  # fmt: skip
    fig.update_yaxes(title_text="q", row=1, col=1)
    fig.update_yaxes(title_text="L(q)", row=2, col=1)
    fig.update_xaxes(title_text="SGD step", row=2, col=1)
    fig.update_layout(template=TEMPLATE, height=560, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      legend={"orientation": "h", "y": -0.12})  # fmt: skip
    return fig


CONTRAST_COLOURS = {
    ("peak-normalised", "detached"): COMPARE_COLOURS[0], ("peak-normalised", "differentiable"): COMPARE_COLOURS[4],
    ("asymptotic", "detached"): COMPARE_COLOURS[1], ("asymptotic", "differentiable"): COMPARE_COLOURS[2],
}  # fmt: skip


def spiking_contrast_figure(table: pd.DataFrame) -> go.Figure:
    """Zenke & Vogels' two contrasts as grouped bars: test accuracy (mean ± std over seeds) per steepness, one bar
    per surrogate scale and reset; the initial gradient norm in the hover."""
    fig = go.Figure()
    for (scale, reset), group in table.groupby(["scale", "reset"], sort=False):
        fig.add_trace(go.Bar(
            x=[f"β = {b:g}" for b in group["steepness"]], y=group["accuracy"], name=f"{scale} scale, {reset} reset",
            marker={"color": CONTRAST_COLOURS.get((scale, reset), COMPARE_COLOURS[3])},
            error_y={"type": "data", "array": group["std"].fillna(0.0), "thickness": 1.5},
            customdata=group["grad_norm_init"],
            hovertemplate=f"{scale}, {reset} reset<br>%{{x}}: accuracy %{{y:.3f}}<br>"
            "input-kernel gradient norm at init %{customdata:.3g}<extra></extra>",
        ))  # fmt: skip
    low = max(0.0, float((table["accuracy"] - table["std"].fillna(0.0)).min()) - 0.05)
    fig.update_layout(template=TEMPLATE, barmode="group", height=380, margin={"l": 60, "r": 20, "t": 30, "b": 50},
                      yaxis={"title": "test accuracy", "range": [low, 1.0]}, xaxis_title="surrogate steepness",
                      legend={"orientation": "h", "y": -0.2})  # fmt: skip
    return fig
