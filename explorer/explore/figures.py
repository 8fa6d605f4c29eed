"""Figures of the explore view: pure functions from sweeps to :class:`plotly.graph_objects.Figure`.

Each figure is written as plain dicts (traces, axes, shapes; the same properties the validated
``make_subplots`` / ``add_trace`` / ``add_vrect`` calls used to produce) and wrapped in a Figure with
plotly's validation off: validating every property cost about 20 times the rest of the build. The
tests build every figure again with validation on and compare.

Drawing conventions (the point of the explorer is to make conventions visible):

* a jump is a BREAK in the line, never a steep segment: each curve is cut where the special-points
  table (declared points, and the points :mod:`explorer.explore.points` detected and confirmed) says it
  is discontinuous: on a grid row, on the side :func:`explorer.explore.detect.discontinuous_sides` finds;
  between two rows, for the curves the point's features name (a forward jump cuts the forward, a
  custom-gradient jump the custom gradient, a forward kink the true gradient);
* at a special point the value AT the point is a filled marker, a one-sided limit that differs
  from it is an open marker (``circle-open``) at the same x. The limit is the value at the
  neighbouring grid row, so it is exact for curves that are flat next to the point;
* vertical lines mark special points, one colour per kind, and their hover text names the kind
  and the convention; undeclared points (found in the sweep, not declared by the op) are drawn in
  a warning colour;
* clipping windows (between consecutive boundaries, where the custom gradient is non-zero) are
  shaded, and so are the regions where autodiff returns ``None`` for the true gradient.

Colours are from the Okabe-Ito colour-blind-safe palette and the same in every figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from explorer.explore import detect
from explorer.explore.figure_layout import (  # noqa: F401 - chart_config ... write_image: importable from here too
    AXIS_STYLE,
    FIGURE_HEIGHT,
    FONT,
    IMAGE_FORMATS,
    IMAGE_WIDTH,
    IMAGES_EXTRA,
    MARGIN,
    PNG_SCALE,
    TEMPLATE,
    as_figure,
    axis_names,
    base_layout,
    chart_config,
    figure_html,
    panels_layout,
    template_json,
    write_image,
)
from explorer.explore.sweeps import Sweep, decimate

SERIES = ("forward", "true_grad", "custom_grad")
SERIES_NAMES = {"forward": "forward", "true_grad": "true gradient (autodiff)", "custom_grad": "custom gradient"}
SERIES_COLOURS = {"forward": "#1F2430", "true_grad": "#E69F00", "custom_grad": "#0072B2"}
KIND_COLOURS = {"jump": "#D55E00", "kink": "#009E73", "boundary": "#CC79A7", "singular": "#56B4E9"}
UNDECLARED_COLOUR = "#E31A1C"
NONFINITE_COLOUR = "#56B4E9"
MISSING_FILL = "#8C8C8C"
MARKER_LEGEND_COLOUR = "#555555"
# One colour per compared sweep; the first is the custom-gradient blue of the main figure.
COMPARE_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#1F2430", "#999933")

CLIP_LABEL = "clip window (gradient passes)"
MISSING_LABEL = "no gradient (autodiff returns None)"
DIFFER_LABEL = "custom ≠ true gradient"
DIFFER_COLOUR = "#D55E00"
NONFINITE_LABEL = "inf / NaN (drawn at the panel top)"
AT_LABEL = "value AT the point (filled)"
LIMIT_LABEL = "one-sided limit (open)"
UNDECLARED_LABEL = "undeclared point"
PANEL_TITLES = {"forward": "Forward", "true_grad": "True gradient (autodiff)", "custom_grad": "Custom gradient"}

MAX_SHADED_RUNS = 50  # more runs than this are shaded as one region
LINE_HOVER_VERTICES = 9  # hoverable vertices along each vertical special-point line (at most)
LINE_VERTEX_BUDGET = 600  # hoverable vertices of all vertical lines of one kind in one panel
MAX_DRAWN_POINTS = 300  # more special points than this: lines and markers for an even subset (breaks for all)
DECLARED_SERIES = {"jump": "forward", "boundary": "custom_grad"}  # the discontinuity a point's kind declares
# Which curve a detected feature makes discontinuous (the true gradient is the forward's derivative).
BREAKS_SERIES = {"forward_jump": "forward", "custom_jump": "custom_grad", "forward_kink": "true_grad"}


# -- small helpers -----------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _finite_or_nan(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, np.nan)


def _merge_runs(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(runs[0][0], runs[-1][1])] if len(runs) > MAX_SHADED_RUNS else runs


def _check_sweep(result: Sweep, name: str = "sweep") -> None:
    if not isinstance(result, Sweep):
        raise ValueError(f"{name} must be an explorer.Sweep (from explorer.sweep(...)), got {type(result).__name__}")
    if len(result) < 2:
        raise ValueError(f"{name} must have at least 2 rows, got {len(result)}")


class _Point(NamedTuple):
    x: float
    kind: str
    note: str
    status: str
    features: str


@dataclass(frozen=True)
class _Points:
    """The special-point table as plain arrays, sorted by x (pandas indexing per trace cost more than the
    whole figure)."""

    x: np.ndarray
    kind: tuple[str, ...]
    note: tuple[str, ...]
    status: tuple[str, ...]
    features: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.x.size)

    def take(self, rows: Sequence[int] | np.ndarray) -> _Points:
        rows = [int(i) for i in rows]
        return _Points(
            self.x[rows] if rows else self.x[:0],
            *(tuple(column[i] for i in rows) for column in (self.kind, self.note, self.status, self.features)),
        )

    def where(self, keep: Sequence[bool]) -> _Points:
        return self.take([i for i, flag in enumerate(keep) if flag])

    def rows(self) -> list[_Point]:
        return [_Point(*row) for row in zip(self.x.tolist(), self.kind, self.note, self.status, self.features, strict=True)]


def _points_for(result: Sweep, points: pd.DataFrame | None) -> _Points:
    """The special-point table: as given, else computed by :func:`explorer.explore.points.special_points`."""
    if points is None:
        from explorer.explore.points import special_points  # noqa: PLC0415  (only when not given)

        points = special_points(result)
    size = len(points)
    if "x" not in points:
        x = np.zeros(0)
    elif points["x"].dtype == np.float64:  # special_points' own table: no conversion needed
        x = points["x"].to_numpy()
    else:
        x = pd.to_numeric(points["x"], errors="coerce").astype(np.float64).to_numpy()

    def text(column: str, default: str) -> list[str]:
        return points[column].astype(str).tolist() if column in points else [default] * size

    columns = (text("kind", ""), text("note", ""), text("status", "ok"), text("features", ""))
    finite = np.flatnonzero(np.isfinite(x))
    order = finite[np.argsort(x[finite], kind="stable")]
    return _Points(x, *(tuple(column) for column in columns)).take(order)


def _point_label(kind: str, note: str, status: str, x0: float, prefix: str = "") -> str:
    """Hover text: kind and convention first (e.g. "boundary, closed: gradient passes AT |x| = 1")."""
    head = f"{kind}, {note}" if note else kind
    if status == "undeclared":
        head = f"undeclared {head}: found in the sweep, not declared by the op"
    elif status == "not detected":
        head += " (declared; the sweep does not show it)"
    return f"{prefix}{head}<br>x = {_fmt(x0)}"


# -- where each curve breaks, and its values at the special points ------------------------------------
@dataclass
class _Mark:
    """One special point on one curve: the value AT it and the one-sided limits that differ."""

    x: float
    at: float
    left: float | None
    right: float | None
    label: str


@dataclass
class _Curve:
    """A curve ready to draw: line with NaN gaps at its breaks, and its special-point marks."""

    column: str
    x: np.ndarray
    y: np.ndarray
    marks: list[_Mark] = field(default_factory=list)


def _breaks_between_rows(point, column: str) -> bool:
    """Does a point that lies between two grid rows make ``column`` discontinuous there?"""
    if point.features:
        return any(BREAKS_SERIES.get(name) == column for name in point.features.split(","))
    return DECLARED_SERIES.get(point.kind) == column


def _special_rows(point: pd.Series) -> np.ndarray:
    """Rows of a sweep's ``point`` column that are special points (not ""); a sweep's categorical column
    is read by its codes, without making an array of 2,001 Python strings per curve."""
    if isinstance(point.dtype, pd.CategoricalDtype) and "" in point.cat.categories:
        return point.cat.codes.to_numpy() != point.cat.categories.get_loc("")
    return point.to_numpy() != ""


def _curve(full: Sweep, shown: Sweep, column: str, points: _Points, drawn: _Points) -> _Curve:
    """Cut ``column`` at its discontinuities (from the points table, on the full sweep) and draw it on the
    decimated rows. Breaks are made at every point of ``points``; marks only at the points of ``drawn``.
    """
    x_full = full["x"].to_numpy(dtype=np.float64)
    y_full = full[column].to_numpy(dtype=np.float64)
    curve_scale = detect.scale(y_full)
    size = x_full.size
    cut_right: list[float] = []  # a gap goes just before the first shown row with x >= this
    marks: list[_Mark] = []
    drawn_x = set(drawn.x.tolist())
    special_rows = _special_rows(full["point"])
    rows = np.clip(np.searchsorted(x_full, points.x), 0, size - 1)
    for row, point in zip(rows.tolist(), points.rows(), strict=True):
        if row > 0 and abs(x_full[row - 1] - point.x) < abs(x_full[row] - point.x):
            row -= 1
        in_dtype = special_rows[row] and abs(x_full[row] - point.x) <= 4e-3 * abs(point.x) + 1e-12  # bfloat16 eps
        if x_full[row] != point.x and not in_dtype:
            # between two rows (a point found by detection): cut the curves it makes discontinuous
            if _breaks_between_rows(point, column):
                cut_right.append(x_full[row] if x_full[row] > point.x else x_full[min(row + 1, size - 1)])
            continue
        x0 = float(x_full[row])  # the point in the sweep dtype (a float64 1/6 is a float32 row)
        declared = DECLARED_SERIES.get(point.kind) == column and point.status != "undeclared"
        break_left, break_right = detect.discontinuous_sides(y_full, row, declared, curve_scale)
        if break_left:
            cut_right.append(x_full[row])
        if break_right and row + 1 < size:
            cut_right.append(x_full[row + 1])
        at = float(y_full[row])
        if not np.isfinite(at) or point.x not in drawn_x:
            continue
        left = float(y_full[row - 1]) if break_left else None
        right = float(y_full[row + 1]) if break_right else None
        marks.append(_Mark(x0, at, left, right, _point_label(point.kind, point.note, point.status, x0)))

    x_shown = shown["x"].to_numpy(dtype=np.float64)
    y_shown = _finite_or_nan(shown[column].to_numpy(dtype=np.float64))
    where = np.unique(np.searchsorted(x_shown, np.asarray(cut_right, dtype=np.float64), side="left"))
    where = where[(where > 0) & (where < x_shown.size)]
    return _Curve(column, np.insert(x_shown, where, np.nan), np.insert(y_shown, where, np.nan), marks)


# -- traces (plain dicts: the figure is built without plotly's per-property validation) ----------------------
def _on_panel(trace: dict, col: int | None) -> dict:
    """``trace`` placed on panel ``col`` (as ``add_trace(row=1, col=col)`` does); None: a figure without panels."""
    if col is not None:
        trace["xaxis"], trace["yaxis"] = axis_names(col)
    return trace


def _compact(values: np.ndarray) -> np.ndarray:
    """``values`` as float32 if that holds every one of them exactly (a sweep of float32 or half precision),
    else unchanged: a line's arrays are sent as half the bytes, and the browser reads the same numbers."""
    narrow = values.astype(np.float32)
    return narrow if np.array_equal(narrow, values, equal_nan=True) else values


def _line_trace(curve: _Curve, name: str, colour: str, legendgroup: str, showlegend: bool = True) -> dict:
    return {
        "type": "scatter",
        "x": _compact(curve.x),
        "y": _compact(curve.y),
        "mode": "lines",
        "name": name,
        "legendgroup": legendgroup,
        "showlegend": showlegend,
        "line": {"color": colour, "width": 2.2},
        "connectgaps": False,
        "hovertemplate": f"{name}<br>x = %{{x:.5g}}<br>y = %{{y:.5g}}<extra></extra>",
    }


def _marker_traces(curve: _Curve, name: str, colour: str, at_group: str, limit_group: str) -> list[dict]:
    """Filled markers AT the points and open markers at the differing one-sided limits."""
    at_x = np.asarray([m.x for m in curve.marks], dtype=np.float64)
    at_y = np.asarray([m.at for m in curve.marks], dtype=np.float64)
    at_text = [f"{name} AT the point: {_fmt(m.at)}<br>{m.label}" for m in curve.marks]
    limit_x: list[float] = []
    limit_y: list[float] = []
    limit_text: list[str] = []
    for mark in curve.marks:
        for side, value in (("left", mark.left), ("right", mark.right)):
            if value is not None and np.isfinite(value):
                limit_x.append(mark.x)
                limit_y.append(value)
                arrow = "⁻" if side == "left" else "⁺"
                limit_text.append(f"{name}, {side} limit (x → {_fmt(mark.x)}{arrow}): {_fmt(value)}<br>{mark.label}")
    traces = []
    if at_x.size:
        traces.append(
            {
                "type": "scatter",
                "x": at_x,
                "y": at_y,
                "mode": "markers",
                "name": f"{name} AT the point",
                "legendgroup": at_group,
                "showlegend": False,
                "marker": {"symbol": "circle", "size": 9, "color": colour, "line": {"color": "white", "width": 1}},
                "text": at_text,
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    if limit_x:
        traces.append(
            {
                "type": "scatter",
                "x": np.asarray(limit_x, dtype=np.float64),
                "y": np.asarray(limit_y, dtype=np.float64),
                "mode": "markers",
                "name": f"{name} one-sided limit",
                "legendgroup": limit_group,
                "showlegend": False,
                "marker": {"symbol": "circle-open", "size": 10, "color": colour, "line": {"width": 2}},
                "text": limit_text,
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    return traces


def _legend_marker(name: str, symbol: str, group: str) -> dict:
    """A legend-only entry that explains a marker (it draws nothing)."""
    return {
        "type": "scatter",
        "x": [None],
        "y": [None],
        "mode": "markers",
        "name": name,
        "legendgroup": group,
        "showlegend": True,
        "marker": {"symbol": symbol, "size": 9, "color": MARKER_LEGEND_COLOUR, "line": {"width": 2}},
        "hoverinfo": "skip",
    }


def _vertical_lines(
    xs: Sequence[float],
    labels: Sequence[str],
    y_range: tuple[float, float],
    *,
    name: str,
    colour: str,
    group: str,
    showlegend: bool,
    dash: str = "dash",
    width: float = 1.4,
) -> dict:
    """Vertical lines at ``xs`` spanning ``y_range``, hoverable along their length.

    Each line has a few hoverable vertices (fewer when there are many lines, to bound the JSON).
    """
    vertices = int(np.clip(LINE_VERTEX_BUDGET // max(len(xs), 1), 2, LINE_HOVER_VERTICES))
    ys = np.linspace(y_range[0], y_range[1], vertices)
    count = len(xs)
    line_x = np.full((count, vertices + 1), np.nan)
    line_y = np.full((count, vertices + 1), np.nan)
    line_x[:, :vertices] = np.asarray(xs, dtype=np.float64)[:, None]
    line_y[:, :vertices] = ys[None, :]
    text = [entry for label in labels for entry in [label] * vertices + [""]]
    return {
        "type": "scatter",
        "x": line_x.ravel(),
        "y": line_y.ravel(),
        "mode": "lines",
        "name": name,
        "legendgroup": group,
        "showlegend": showlegend,
        "line": {"color": colour, "width": width, "dash": dash},
        "opacity": 0.85,
        "text": text,
        "hovertemplate": "%{text}<extra></extra>",
    }


def _thin(table: _Points) -> _Points:
    """At most MAX_DRAWN_POINTS special points, evenly spread, for lines and markers (bounds the JSON)."""
    if len(table) <= MAX_DRAWN_POINTS:
        return table
    keep = np.unique(np.linspace(0, len(table) - 1, MAX_DRAWN_POINTS).round().astype(int))
    return table.take(keep)


def _panel_range(curves: Sequence[_Curve], include_zero: bool) -> tuple[float, float]:
    values = [c.y[np.isfinite(c.y)] for c in curves]
    values += [np.asarray([v for m in c.marks for v in (m.at, m.left, m.right) if v is not None]) for c in curves]
    finite = np.concatenate([v for v in values if v.size] or [np.zeros(1)])
    finite = finite[np.isfinite(finite)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if include_zero:
        low, high = min(low, 0.0), max(high, 0.0)
    span = high - low
    pad = 0.08 * span if span > 0 else max(0.5 * abs(high), 0.5)
    return low - pad, high + pad


def _default_title(result: Sweep) -> tuple[str, str]:
    """(title, subtitle) of a sweep: op, parameters, upstream gradient, dtype, range and size."""
    key, title = result.key, result.title or result.key
    if key != title:
        title = f"{title} <span style='color:#888'>({key})</span>"
    bits = [f"{name} = {_fmt(float(value))}" for name, value in result.params.items()]
    if result.upstream != 1.0:
        bits.append(f"upstream dy = {_fmt(result.upstream)}")
    bits.append(result.dtype)
    bits.append(f"x in [{_fmt(result.lo)}, {_fmt(result.hi)}], {len(result):,} points")
    return title, " · ".join(bits)


def _shade(
    layout: dict,
    runs: list[tuple[float, float]],
    col: int,
    *,
    name: str,
    colour: str,
    opacity: float,
    showlegend: bool,
    annotation: str | None = None,
) -> bool:
    """Shade x intervals on one panel (full panel height); the first one carries the legend entry and the
    annotation, at its top left. Returns whether any was drawn."""
    x_name, y_name = axis_names(col)
    for index, (x0, x1) in enumerate(runs):
        layout.setdefault("shapes", []).append(
            {
                "type": "rect",
                "x0": x0,
                "x1": x1,
                "xref": x_name,
                "y0": 0,
                "y1": 1,
                "yref": f"{y_name} domain",
                "fillcolor": colour,
                "opacity": opacity,
                "line": {"width": 0},
                "layer": "below",
                "name": name,
                "legendgroup": name,
                "showlegend": showlegend and index == 0,
            }
        )
        if annotation and index == 0:
            layout.setdefault("annotations", []).append(
                {
                    "text": annotation,
                    "font": {"size": 11, "color": "#555"},
                    "showarrow": False,
                    "x": x0,
                    "xanchor": "left",
                    "xref": x_name,
                    "y": 1,
                    "yanchor": "top",
                    "yref": f"{y_name} domain",
                }
            )
    return bool(runs)


def _clip_windows(full: Sweep, points: _Points) -> list[tuple[float, float]]:
    """Intervals between consecutive boundaries where the custom gradient is mostly non-zero."""
    bounds = np.unique(points.x[[kind == "boundary" for kind in points.kind]])
    x = full["x"].to_numpy(dtype=np.float64)
    custom = full["custom_grad"].to_numpy(dtype=np.float64)
    windows = []
    for x0, x1 in zip(bounds[:-1], bounds[1:], strict=True):
        inside = (x > x0) & (x < x1)
        if inside.any() and np.mean(custom[inside] != 0) > 0.5:
            windows.append((float(x0), float(x1)))
    return windows


def _x_runs(x: np.ndarray, mask: np.ndarray) -> list[tuple[float, float]]:
    runs = _merge_runs(detect.runs(mask))
    return [(float(x[a]), float(x[b])) for a, b in runs]


# -- public figures --------------------------------------------------------------------------------------
def main_figure(
    result: Sweep,
    points: pd.DataFrame | None = None,
    *,
    overlay: bool = False,
    title: str | None = None,
    max_points: int = 5000,
) -> go.Figure:
    """Forward | true gradient | custom gradient of one sweep (or forward | both gradients if ``overlay``).

    ``points`` is the table of :func:`explorer.explore.points.special_points` (computed when None). Every
    curve has at most about ``max_points`` points (:func:`explorer.explore.sweeps.decimate`), keeping every
    special point and both sides of every jump. :func:`main_figure_spec` is the same figure as dicts.
    """
    return as_figure(main_figure_spec(result, points, overlay=overlay, title=title, max_points=max_points))


def main_figure_spec(
    result: Sweep,
    points: pd.DataFrame | None = None,
    *,
    overlay: bool = False,
    title: str | None = None,
    max_points: int = 5000,
    differ: tuple[tuple[float, float], ...] = (),
) -> dict:
    """:func:`main_figure` as plain dicts ``{"data": [...], "layout": {...}}`` (arrays as NumPy arrays): what a
    page sends to the browser, without building plotly objects (see :func:`explorer.ui.widgets.plotly_chart`)."""
    _check_sweep(result)
    shown = decimate(result, max_points)
    table = _points_for(result, points)
    drawn = _thin(table)
    curves = {column: _curve(result, shown, column, table, drawn) for column in SERIES}
    panels: list[tuple[str, ...]] = [("forward",), ("true_grad", "custom_grad")] if overlay else [(c,) for c in SERIES]
    # the true gradient's name says how it was obtained: "(autodiff)", or "(numerical)" for a user op
    # without a declared forward (ops.user: a central difference of its forward values)
    series_names = {**SERIES_NAMES, "true_grad": result.true_gradient_label}
    panel_titles = {**PANEL_TITLES, "true_grad": result.true_gradient_label.capitalize()}
    titles = ["Forward", "True and custom gradient"] if overlay else [panel_titles[c] for c in SERIES]
    default_title, subtitle = _default_title(result)
    if len(drawn) < len(table):
        subtitle += f" · marked: {len(drawn)} of {len(table)} special points"
    layout = base_layout(title if title is not None else default_title, subtitle)
    panels_layout(layout, titles, 0.07 if overlay else 0.06)
    data: list[dict] = []
    x_full = result["x"].to_numpy(dtype=np.float64)
    clip_windows = _clip_windows(result, table)
    has_marks = False
    kinds_shown: set[str] = set()
    undeclared_shown = False
    nonfinite_shown = False
    for col, columns in enumerate(panels, start=1):
        panel_curves = [curves[c] for c in columns]
        y_range = _panel_range(panel_curves, include_zero=columns[0] != "forward")
        y_axis = layout[f"yaxis{col if col > 1 else ''}"]
        y_axis["title"] = {"text": "forward y" if columns[0] == "forward" else "dy/dx"}
        y_axis["range"] = list(y_range)
        # shading first, so it sits below the curves
        _shade(
            layout, clip_windows, col, name=CLIP_LABEL, colour=KIND_COLOURS["boundary"], opacity=0.10,
            showlegend=col == 1,
        )  # fmt: skip
        if "custom_grad" in columns:  # where a view found the custom gradient unequal to the true one
            _shade(layout, list(differ), col, name=DIFFER_LABEL, colour=DIFFER_COLOUR, opacity=0.12, showlegend=True)
        if "true_grad" in columns:
            missing = _x_runs(x_full, result["true_grad_missing"].to_numpy(dtype=bool))
            _shade(
                layout,
                missing,
                col,
                name=MISSING_LABEL,
                colour=MISSING_FILL,
                opacity=0.16,
                showlegend=True,
                annotation=MISSING_LABEL,
            )
        # special-point lines, one trace per kind
        for kind, colour in KIND_COLOURS.items():
            rows = [p for p in drawn.rows() if p.kind == kind and p.status != "undeclared"]
            if not rows:
                continue
            labels = [_point_label(p.kind, p.note, p.status, p.x) for p in rows]
            line = _vertical_lines(
                [p.x for p in rows],
                labels,
                y_range,
                name=f"special point: {kind}",
                colour=colour,
                group=f"kind-{kind}",
                showlegend=kind not in kinds_shown,
            )
            data.append(_on_panel(line, col))
            kinds_shown.add(kind)
        undeclared = [p for p in drawn.rows() if p.status == "undeclared"]
        if undeclared:
            labels = [_point_label(p.kind, p.note, p.status, p.x) for p in undeclared]
            line = _vertical_lines(
                [p.x for p in undeclared],
                labels,
                y_range,
                name=UNDECLARED_LABEL,
                colour=UNDECLARED_COLOUR,
                group="undeclared",
                dash="dashdot",
                width=2.4,
                showlegend=not undeclared_shown,
            )
            data.append(_on_panel(line, col))
            undeclared_shown = True
        # curves, then markers on top
        for curve in panel_curves:
            name = series_names[curve.column]
            data.append(_on_panel(_line_trace(curve, name, SERIES_COLOURS[curve.column], curve.column), col))
        for curve in panel_curves:
            for trace in _marker_traces(
                curve, series_names[curve.column], SERIES_COLOURS[curve.column], "at-point", "one-sided-limit"
            ):
                data.append(_on_panel(trace, col))
                has_marks = True
        # inf / NaN values: marked at the top of the panel
        for curve in panel_curves:
            values = result[curve.column].to_numpy(dtype=np.float64)
            runs = _merge_runs(detect.runs(~np.isfinite(values)))
            if not runs:
                continue
            mid = [float(x_full[(a + b) // 2]) for a, b in runs]
            text = [
                f"{series_names[curve.column]} is inf/NaN on x in [{_fmt(x_full[a])}, {_fmt(x_full[b])}]"
                for a, b in runs
            ]
            trace = {
                "type": "scatter",
                "x": mid,
                "y": [y_range[1] - 0.04 * (y_range[1] - y_range[0])] * len(mid),
                "mode": "markers",
                "name": NONFINITE_LABEL,
                "legendgroup": "nonfinite",
                "showlegend": not nonfinite_shown,
                "marker": {
                    "symbol": "x-thin",
                    "size": 12,
                    "color": NONFINITE_COLOUR,
                    "line": {"width": 3, "color": NONFINITE_COLOUR},
                },
                "text": text,
                "hovertemplate": "%{text}<extra></extra>",
            }
            data.append(_on_panel(trace, col))
            nonfinite_shown = True
    if has_marks:
        data.append(_on_panel(_legend_marker(AT_LABEL, "circle", "at-point"), 1))
        data.append(_on_panel(_legend_marker(LIMIT_LABEL, "circle-open", "one-sided-limit"), 1))
    return {"data": data, "layout": layout}


def compare_figure(
    sweeps: Sequence[Sweep],
    labels: Sequence[str],
    points: Sequence[pd.DataFrame | None] | None = None,
    *,
    max_points: int = 5000,
    title: str | None = None,
) -> go.Figure:
    """Custom gradients of several sweeps overlaid, each in its own colour with its own special points.

    Use it for several ops, or one op at several values of one parameter (e.g. ``ste_sign`` with
    ``clip_value`` 0.5, 1, 2); the caller makes the sweeps and labels. :func:`compare_figure_spec` is the
    same figure as dicts.
    """
    return as_figure(compare_figure_spec(sweeps, labels, points, max_points=max_points, title=title))


def compare_figure_spec(
    sweeps: Sequence[Sweep],
    labels: Sequence[str],
    points: Sequence[pd.DataFrame | None] | None = None,
    *,
    max_points: int = 5000,
    title: str | None = None,
) -> dict:
    """:func:`compare_figure` as plain dicts ``{"data": [...], "layout": {...}}``."""
    sweeps = list(sweeps)
    labels = [str(label) for label in labels]
    if not sweeps:
        raise ValueError("sweeps must hold at least one Sweep")
    if len(labels) != len(sweeps):
        raise ValueError(f"labels must have one label per sweep: {len(sweeps)} sweeps, {len(labels)} labels")
    if points is not None and len(points) != len(sweeps):
        raise ValueError(f"points must be None or one table per sweep: {len(sweeps)} sweeps, {len(points)} tables")
    for index, result in enumerate(sweeps):
        _check_sweep(result, f"sweeps[{index}]")
    tables = [_points_for(result, None if points is None else points[i]) for i, result in enumerate(sweeps)]
    tables_drawn = [_thin(table) for table in tables]
    curves = [
        _curve(result, decimate(result, max_points), "custom_grad", table, drawn)
        for result, table, drawn in zip(sweeps, tables, tables_drawn, strict=True)
    ]
    y_range = _panel_range(curves, include_zero=True)
    data: list[dict] = []
    has_marks = False
    for index, (curve, table, label) in enumerate(zip(curves, tables_drawn, labels, strict=True)):
        colour = COMPARE_COLOURS[index % len(COMPARE_COLOURS)]
        group = f"sweep-{index}"
        if len(table):
            point_labels = [_point_label(p.kind, p.note, p.status, p.x, prefix=f"{label}: ") for p in table.rows()]
            data.append(
                _vertical_lines(
                    table.x.tolist(),
                    point_labels,
                    y_range,
                    name=f"{label}: special points",
                    colour=colour,
                    group=group,
                    showlegend=False,
                    dash="dash",
                )
            )
        data.append(_line_trace(curve, label, colour, group))
        for trace in _marker_traces(curve, label, colour, group, group):
            data.append(trace)
            has_marks = True
    if has_marks:
        data.append(_legend_marker(AT_LABEL, "circle", "legend-at"))
        data.append(_legend_marker(LIMIT_LABEL, "circle-open", "legend-limit"))
    subtitle = "dashed lines: each curve's special points, in its colour"
    layout = base_layout(title if title is not None else "Custom gradients compared", subtitle)
    layout["margin"]["t"] = 80
    layout["legend"]["y"] = -0.18
    layout["xaxis"] = {"title": {"text": "x"}, **AXIS_STYLE}
    layout["yaxis"] = {**AXIS_STYLE, "title": {"text": "dy/dx (custom gradient)"}, "range": list(y_range)}
    return {"data": data, "layout": layout}
