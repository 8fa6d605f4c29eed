"""Figures of the explore view: breaks at jumps, filled/open markers, shading, legend, size.

References are independent of ``explorer.explore.figures``: values AT and beside each special point come
from the op's own TensorFlow forward / autodiff or from a NumPy formula written here.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

import ops
from explorer.explore import figures
from explorer.explore.sweeps import Sweep, sweep

N = 2001
_SWEEPS: dict[tuple, Sweep] = {}


def cached_sweep(key: str, n: int = N, **params) -> Sweep:
    """Sweeps are shared by every test in this module (they are the slow part)."""
    cache_key = (key, n, tuple(sorted(params.items())))
    if cache_key not in _SWEEPS:
        _SWEEPS[cache_key] = sweep(key, n=n, params=params or None)
    return _SWEEPS[cache_key]


def point_table(df: Sweep) -> pd.DataFrame:
    from explorer.explore.points import special_points

    return special_points(df)


_FIGURES: dict[tuple, object] = {}


def cached_figure(key: str, overlay: bool = False, **params):
    cache_key = (key, overlay, tuple(sorted(params.items())))
    if cache_key not in _FIGURES:
        df = cached_sweep(key, **params)
        _FIGURES[cache_key] = figures.main_figure(df, point_table(df), overlay=overlay)
    return _FIGURES[cache_key]


# -- helpers that read a figure --------------------------------------------------------------------
def axis_of(trace) -> str:
    return trace.xaxis or "x"


def line(fig, name: str, axis: str | None = None):
    found = [t for t in fig.data if t.name == name and t.mode == "lines" and (axis is None or axis_of(t) == axis)]
    assert len(found) == 1, f"expected one line trace {name!r} on {axis}, found {len(found)}"
    return found[0]


def markers(fig, series: str, symbol: str, axis: str | None = None) -> list[tuple[float, float]]:
    """(x, y) of the filled ("circle") or open ("circle-open") markers of one series."""
    prefix = figures.SERIES_NAMES.get(series, series)
    out = []
    for trace in fig.data:
        if trace.mode != "markers" or not (trace.name or "").startswith(prefix) or trace.x[0] is None:
            continue
        if trace.marker.symbol == symbol and (axis is None or axis_of(trace) == axis):
            out += list(zip(np.asarray(trace.x, float), np.asarray(trace.y, float), strict=True))
    return out


def segments(trace) -> list[tuple[np.ndarray, np.ndarray]]:
    """The connected pieces of a line trace (NaN / None separate them)."""
    x = np.asarray(trace.x, dtype=float)
    y = np.asarray(trace.y, dtype=float)
    gap = ~(np.isfinite(x) & np.isfinite(y))
    pieces, start = [], 0
    for stop in [*np.flatnonzero(gap), x.size]:
        if stop > start:
            pieces.append((x[start:stop], y[start:stop]))
        start = stop + 1
    return pieces


def forward_at(key: str, x0: float, **params) -> float:
    return float(ops.get(key).forward(tf.constant([x0], tf.float32), **params).numpy()[0])


def n_panels(fig) -> int:
    return len([k for k in fig.layout.to_plotly_json() if k.startswith("xaxis")])


def shapes_named(fig, name: str) -> list:
    return [s for s in fig.layout.shapes if s.name == name]


# -- layout ----------------------------------------------------------------------------------------
def test_three_panels_with_shared_x_and_titles():
    fig = cached_figure("ste_sign")
    assert n_panels(fig) == 3
    assert fig.layout.xaxis2.matches == "x" and fig.layout.xaxis3.matches == "x"  # one zoom for all panels
    titles = [a.text for a in fig.layout.annotations if a.xref == "paper"]
    assert titles == ["Forward", "True gradient (autodiff)", "Custom gradient"]
    assert fig.layout.xaxis.title.text == "x"
    assert fig.layout.yaxis.title.text == "forward y" and fig.layout.yaxis3.title.text == "dy/dx"
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0  # below the plots
    assert fig.layout.template.layout.plot_bgcolor == "white"


def test_each_series_has_its_line_on_its_own_panel_in_one_colour():
    fig = cached_figure("atan")
    overlay = cached_figure("atan", overlay=True)
    colours = set()
    for axis, series in zip(("x", "x2", "x3"), figures.SERIES, strict=True):
        name = figures.SERIES_NAMES[series]
        colour = line(fig, name, axis).line.color
        assert line(overlay, name).line.color == colour
        colours.add(colour)
    assert len(colours) == 3
    names = {t.name for t in fig.data}
    assert {"forward", "true gradient (autodiff)", "custom gradient"} <= names


def test_overlay_puts_both_gradients_on_one_axis():
    fig = cached_figure("ste_sign", overlay=True)
    assert n_panels(fig) == 2
    true_line = line(fig, "true gradient (autodiff)")
    custom_line = line(fig, "custom gradient")
    assert axis_of(true_line) == axis_of(custom_line) == "x2"
    assert true_line.yaxis == custom_line.yaxis == "y2"
    assert axis_of(line(fig, "forward")) == "x"
    # the markers of both gradients are on the shared gradient panel
    assert markers(fig, "custom_grad", "circle", "x2") and markers(fig, "true_grad", "circle", "x2")


# -- jumps are breaks, with the value AT filled and the limits open ---------------------------------
JUMP_OPS = [key for key in ops.names() if any(p.kind == "jump" for p in ops.get(key).points(-3, 3))]


@pytest.mark.parametrize("key", JUMP_OPS)
def test_forward_breaks_at_every_jump_and_marks_the_value_at_it(key):
    fig = cached_figure(key)
    forward = line(fig, "forward", "x")
    filled = markers(fig, "forward", "circle", "x")
    opened = markers(fig, "forward", "circle-open", "x")
    for point in ops.get(key).points(-3, 3):
        if point.kind != "jump":
            continue
        x0 = np.float32(point.x).item()
        at = forward_at(key, x0)
        left, right = forward_at(key, x0 - 1e-3), forward_at(key, x0 + 1e-3)
        jump = abs(right - left)
        assert jump > 0
        for xs, ys in segments(forward):
            crossing = (xs[:-1] < x0) & (xs[1:] > x0)
            assert not crossing.any(), f"a forward segment crosses the jump at {x0}"
            touching = (xs[:-1] <= x0) & (xs[1:] >= x0)
            assert np.all(np.abs(np.diff(ys))[touching] < 0.5 * jump), f"steep segment at the jump at {x0}"
        assert any(mx == x0 and my == pytest.approx(at) for mx, my in filled), f"no filled marker at {x0}"
        limit = left if at != left else right  # the side the value AT does not belong to
        assert any(mx == x0 and my == pytest.approx(limit) for mx, my in opened), f"no open marker at {x0}"


def test_ste_sign_forward_at_zero_is_plus_one_filled_and_minus_one_open():
    fig = cached_figure("ste_sign")
    np_sign = lambda x: np.where(np.asarray(x) >= 0, 1.0, -1.0)  # Larq: sign(0) = +1  # noqa: E731
    assert (0.0, float(np_sign(0.0))) in markers(fig, "forward", "circle", "x")
    assert (0.0, float(np_sign(-1e-3))) in markers(fig, "forward", "circle-open", "x")
    # no segment connects -1 to +1 across x = 0
    for xs, _ys in segments(line(fig, "forward", "x")):
        assert not ((xs < 0).any() and (xs > 0).any()), "one forward segment spans both sides of 0"


def test_ste_sign_closed_boundary_shows_gradient_one_at_the_boundary():
    fig = cached_figure("ste_sign")
    clip_value = 1.0
    passes = lambda x: float(abs(x) <= clip_value)  # closed box  # noqa: E731
    filled = markers(fig, "custom_grad", "circle", "x3")
    opened = markers(fig, "custom_grad", "circle-open", "x3")
    for x0 in (-clip_value, clip_value):
        assert (x0, passes(x0)) in filled
        assert (x0, passes(x0 * 1.01)) in opened  # the limit from outside: 0, drawn open
    custom = line(fig, "custom gradient", "x3")
    for _xs, ys in segments(custom):  # no steep line from 1 down to 0 at the boundaries
        assert np.all(np.abs(np.diff(ys)) < 0.5)


def test_rect_open_boundary_shows_zero_at_the_boundary():
    fig = cached_figure("rect")
    alpha = 1.0
    surrogate = lambda x: alpha * float(abs(x) < 0.5 / alpha)  # open box  # noqa: E731
    filled = markers(fig, "custom_grad", "circle", "x3")
    opened = markers(fig, "custom_grad", "circle-open", "x3")
    for x0 in (-0.5 / alpha, 0.5 / alpha):
        assert (x0, surrogate(x0)) in filled and surrogate(x0) == 0.0
        assert (x0, surrogate(x0 * 0.99)) in opened  # the limit from inside: alpha, drawn open


def test_relu_at_zero_gradient_points_are_isolated_values():
    """at_zero = 0.5 is neither one-sided limit: both sides of the custom line break at 0."""
    fig = cached_figure("relu_at_zero")
    at_zero = ops.get("relu_at_zero").defaults()["at_zero"]
    assert (0.0, at_zero) in markers(fig, "custom_grad", "circle", "x3")
    assert {(0.0, 0.0), (0.0, 1.0)} <= set(markers(fig, "custom_grad", "circle-open", "x3"))
    x = tf.constant([0.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = ops.get("relu_at_zero").forward(x)
    autodiff_at_zero = float(tape.gradient(y, x).numpy()[0])
    assert (0.0, autodiff_at_zero) in markers(fig, "true_grad", "circle", "x2")


POINT_SEARCH = 1e4  # where an op with no special point in [-3, 3] is searched for one


def test_every_op_has_its_points_marked_somewhere():
    """The ops without a point in [-3, 3] (whose figure the next test checks elsewhere or not at all)."""
    outside = {key for key in ops.names() if not ops.get(key).points(-3, 3)}
    assert outside == {"clip_gradient", "scaled_square", "gradient_reversal", "scale_gradient", "log1pexp"}
    assert {key for key in outside if ops.get(key).points(-POINT_SEARCH, POINT_SEARCH)} == {"log1pexp"}


@pytest.mark.parametrize("key", ops.names())
def test_every_op_marks_the_values_at_its_points_on_every_panel(key):
    """The filled marker AT each declared point carries the op's own value there (forward, autodiff, custom)."""
    spec = ops.get(key)
    fig = cached_figure(key)
    assert len(fig.to_json()) <= 1_000_000
    points = spec.points(-3, 3)
    if not points:  # four ops have no special point at all, log1pexp one only at x = 88.72
        assert markers(fig, "forward", "circle") == markers(fig, "custom_grad", "circle") == []
        beyond = spec.points(-POINT_SEARCH, POINT_SEARCH)
        if not beyond:
            return
        lo, hi = min(p.x for p in beyond) - 3, max(p.x for p in beyond) + 3
        result = sweep(key, lo, hi, n=N)
        fig, points = figures.main_figure(result, point_table(result)), spec.points(lo, hi)
        assert points == beyond
    for point in points:
        x = tf.constant([np.float32(point.x)])
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            forward = spec.forward(x)
        true_grad = tape.gradient(forward, x)
        expected = {
            ("forward", "x"): float(forward.numpy()[0]),
            ("true_grad", "x2"): 0.0 if true_grad is None else float(true_grad.numpy()[0]),  # None is drawn as 0
            ("custom_grad", "x3"): float(spec.surrogate_grad(x).numpy()[0]),
        }
        x0 = float(x.numpy()[0])
        for (series, axis), value in expected.items():
            at_point = [my for mx, my in markers(fig, series, "circle", axis) if mx == x0]
            if np.isfinite(value):
                assert at_point == [pytest.approx(value, rel=1e-6, abs=1e-7)], f"{series} AT {x0}"
            else:
                assert not at_point  # inf/NaN is flagged at the panel top instead


# -- shading, labels, hover ----------------------------------------------------------------------------------
def test_ste_sign_clip_window_is_shaded_with_a_legend_entry():
    fig = cached_figure("ste_sign")
    windows = shapes_named(fig, figures.CLIP_LABEL)
    assert windows and {(s.x0, s.x1) for s in windows} == {(-1.0, 1.0)}
    assert sum(bool(s.showlegend) for s in windows) == 1
    assert not shapes_named(cached_figure("atan"), figures.CLIP_LABEL)  # no boundaries, no window


def test_no_gradient_region_labelled_for_atan_but_not_for_ste_sign():
    atan_df, sign_df = cached_sweep("atan"), cached_sweep("ste_sign")
    assert atan_df["true_grad_missing"].all() and not sign_df["true_grad_missing"].any()  # the premise
    label = "no gradient (autodiff returns None)"
    atan_fig, sign_fig = cached_figure("atan"), cached_figure("ste_sign")
    assert label in [a.text for a in atan_fig.layout.annotations]
    shaded = shapes_named(atan_fig, label)
    assert len(shaded) == 1 and shaded[0].xref == "x2" and shaded[0].showlegend
    assert (shaded[0].x0, shaded[0].x1) == (-3.0, 3.0)
    assert label not in [a.text for a in sign_fig.layout.annotations]
    assert not shapes_named(sign_fig, label)


def test_vertical_lines_hover_names_kind_and_convention():
    fig = cached_figure("ste_sign")
    for point in ops.get("ste_sign").points(-3, 3):
        trace = next(t for t in fig.data if t.name == f"special point: {point.kind}")
        texts = [text for x, text in zip(trace.x, trace.text, strict=True) if x == point.x]
        assert texts and all(point.kind in t and point.note in t for t in texts)
        assert trace.line.color == figures.KIND_COLOURS[point.kind]


def test_legend_explains_markers_and_kinds():
    fig = cached_figure("ste_sign")
    in_legend = {t.name for t in fig.data if t.showlegend is not False}
    expected = {
        "forward",
        "true gradient (autodiff)",
        "custom gradient",
        "value AT the point (filled)",
        "one-sided limit (open)",
        "special point: jump",
        "special point: boundary",
    }
    assert expected <= in_legend
    assert "special point: kink" not in in_legend  # only kinds the op has
    hover = line(fig, "forward", "x").hovertemplate
    assert "%{x:.5g}" in hover and "%{y:.5g}" in hover


def test_singular_true_gradient_breaks_and_is_marked():
    df = cached_sweep("safe_norm")
    fig = cached_figure("safe_norm")
    x = tf.constant([0.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = ops.get("safe_norm").forward(x)
    assert np.isnan(tape.gradient(y, x).numpy()[0])  # the premise: autodiff is NaN at 0
    true_line = line(fig, "true gradient (autodiff)", "x2")
    xs, ys = np.asarray(true_line.x, float), np.asarray(true_line.y, float)
    assert not np.isfinite(ys[xs == 0.0]).any()  # the NaN row is a gap, not a value
    flagged = [t for t in fig.data if t.name == figures.NONFINITE_LABEL]
    assert flagged and 0.0 in list(flagged[0].x) and axis_of(flagged[0]) == "x2"
    assert len(df) > 0 and "special point: singular" in {t.name for t in fig.data}


# -- hand-built sweeps: edge cases -------------------------------------------------------------------------
HAND_MADE = ops.OpSpec(
    key="hand_made",
    title="hand-made data",
    family="override",
    params=(),
    forward_fn=lambda x, p: x,
    surrogate=lambda x, p: tf.ones_like(x),
    forward_tex="x",
    grad_tex="1",
    why="",
    reference="",
    builtin=False,
)


def hand_sweep(x, forward, true_grad, custom_grad, missing=False, point=None) -> Sweep:
    """A Sweep whose rows are given (the op only names it): figures draw what the rows say."""
    x = np.asarray(x, float)
    frame = pd.DataFrame(
        {
            "x": x,
            "forward": forward,
            "true_grad": true_grad,
            "custom_grad": custom_grad,
            "true_grad_missing": np.full(x.size, missing),
            "point": point if point is not None else np.full(x.size, ""),
        }
    )
    return Sweep(HAND_MADE, {}, float(x[0]), float(x[-1]), x.size, "float64", 1.0, frame)


EMPTY_POINTS = pd.DataFrame({"x": [], "kind": [], "note": [], "status": []})


def test_smooth_curves_are_never_broken():
    x = np.linspace(-3, 3, 3001)
    df = hand_sweep(x, np.sin(5 * x), 5 * np.cos(5 * x), np.exp(-20 * x**2) * 10)
    fig = figures.main_figure(df, EMPTY_POINTS)
    for name in figures.SERIES_NAMES.values():
        assert len(segments(line(fig, name))) == 1
    assert not [t for t in fig.data if t.mode == "markers" and t.x[0] is not None]


def test_undeclared_jump_breaks_and_is_drawn_in_the_warning_colour():
    x = np.linspace(-1, 1, 401)
    step = np.where(x > 0.3, 2.0, 0.0) + 0.1 * x  # a jump of 2 at 0.3 on a slope: declared by nobody
    df = hand_sweep(x, step, np.full(x.size, 0.1), np.ones(x.size))
    detected = pd.DataFrame({"x": [0.3], "kind": ["jump"], "note": ["found in the sweep"], "status": ["undeclared"]})
    fig = figures.main_figure(df, detected)
    pieces = segments(line(fig, "forward"))
    assert len(pieces) == 2 and pieces[0][0].max() <= 0.3 < pieces[1][0].min()
    warning = [t for t in fig.data if t.name == figures.UNDECLARED_LABEL]
    assert len(warning) == 3 and all(t.line.color == figures.UNDECLARED_COLOUR for t in warning)
    assert "undeclared" in warning[0].text[0]


def test_nan_rows_break_the_line():
    x = np.linspace(-1, 1, 201)
    true_grad = np.where(np.abs(x) < 0.2, np.nan, x)
    true_grad[-1] = np.inf
    df = hand_sweep(x, x, true_grad, np.ones(x.size))
    fig = figures.main_figure(df, EMPTY_POINTS)
    pieces = segments(line(fig, "true gradient (autodiff)"))
    assert len(pieces) == 2 and all(np.abs(xs).min() >= 0.2 for xs, _ in pieces)
    flagged = next(t for t in fig.data if t.name == figures.NONFINITE_LABEL)
    assert len(flagged.x) == 2  # the NaN run and the inf row


def test_many_jumps_all_break_but_only_some_are_marked():
    """600 declared jumps: every one breaks the line; markers and lines for a subset keep the JSON small."""
    rows_per_level, levels = 100, 600
    index = np.arange(rows_per_level * levels + 1)
    x = index / (rows_per_level * levels)
    staircase = (index // rows_per_level) / levels  # right-continuous: the value AT a jump is the upper level
    is_jump = (index % rows_per_level == 0) & (index > 0) & (index < index[-1])
    point = np.where(is_jump, "jump", "")
    df = hand_sweep(x, staircase, np.zeros(x.size), np.ones(x.size), point=point)
    table = pd.DataFrame({"x": x[is_jump], "kind": "jump", "note": "a level", "status": "ok"})
    fig = figures.main_figure(df, table)
    assert len(fig.to_json()) <= 1_000_000
    assert len(segments(line(fig, "forward"))) == is_jump.sum() + 1
    filled = markers(fig, "forward", "circle", "x")
    assert 0 < len(filled) <= figures.MAX_DRAWN_POINTS
    upper = dict(zip(x[is_jump], staircase[is_jump], strict=True))
    assert all(y == upper[mx] for mx, y in filled)
    assert f"of {is_jump.sum()} special points" in fig.layout.title.subtitle.text


def test_argument_errors_are_value_errors():
    df = cached_sweep("atan")
    with pytest.raises(ValueError, match="max_points"):
        figures.main_figure(df, EMPTY_POINTS, max_points=10)
    with pytest.raises(ValueError, match="must be an explorer.Sweep"):
        figures.main_figure(df.frame, EMPTY_POINTS)  # a table without the op it came from
    with pytest.raises(ValueError, match="labels"):
        figures.compare_figure([df, df], ["only one"])
    with pytest.raises(ValueError, match="sweeps"):
        figures.compare_figure([], [])
    with pytest.raises(ValueError, match="fig"):
        figures.figure_html("<div>")


# -- size and decimation ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "params"), [("ste_sign", {}), ("dorefa", {"k_bit": 8})])  # 8 bits: 255 jumps
def test_million_point_figure_is_under_one_megabyte_and_keeps_every_point(key, params):
    df = sweep(key, n=1_000_000, params=params)
    for overlay in (False, True):
        fig = figures.main_figure(df, point_table(df), overlay=overlay, max_points=5000)
        assert len(fig.to_json()) <= 1_000_000
    forward = line(fig, "forward")
    assert np.isfinite(np.asarray(forward.x, float)).sum() <= 5000 + 100
    shown = set(np.asarray(forward.x, float).tolist())
    for point in ops.get(key).points(-3, 3, **params):
        assert np.float32(point.x).item() in shown
    jumps = [p for p in ops.get(key).points(-3, 3, **params) if p.kind == "jump"]
    assert len(segments(forward)) == len(jumps) + 1


def test_full_resolution_figure_without_decimation_is_under_one_megabyte():
    df = cached_sweep("ste_sign", n=5000)
    fig = figures.main_figure(df, point_table(df), max_points=5000)
    assert len(fig.to_json()) <= 1_000_000


# -- compare -------------------------------------------------------------------------------------------
def test_compare_one_op_at_three_parameter_values():
    clip_values = (0.5, 1.0, 2.0)
    sweeps = [cached_sweep("ste_sign", clip_value=c) for c in clip_values]
    labels = [f"clip_value = {c:g}" for c in clip_values]
    fig = figures.compare_figure(sweeps, labels, [point_table(df) for df in sweeps])
    lines = [t for t in fig.data if t.mode == "lines" and t.name in labels]
    assert [t.name for t in lines] == labels  # one custom-gradient line per sweep
    colours = [t.line.color for t in lines]
    assert len(set(colours)) == 3
    for clip_value, label, colour in zip(clip_values, labels, colours, strict=True):
        marks = next(t for t in fig.data if t.name == f"{label}: special points")
        assert marks.line.color == colour and marks.line.dash == "dash"
        xs = {x for x in marks.x if x is not None}
        assert {-clip_value, clip_value} <= xs
        filled = markers(fig, label, "circle")
        passes = lambda x, c=clip_value: float(abs(x) <= c)  # noqa: E731
        assert (clip_value, passes(clip_value)) in filled and (-clip_value, passes(-clip_value)) in filled
    assert fig.layout.yaxis.title.text.startswith("dy/dx")


def test_compare_two_ops_computes_points_when_not_given():
    sweeps = [cached_sweep("atan"), cached_sweep("sigmoid")]
    fig = figures.compare_figure(sweeps, ["atan", "sigmoid"])
    assert [t.name for t in fig.data if t.mode == "lines" and t.name in ("atan", "sigmoid")] == ["atan", "sigmoid"]
    assert len(fig.to_json()) <= 1_000_000


# -- HTML export -------------------------------------------------------------------------------------------
def test_figure_html_embeds_plotly_without_network():
    html = figures.figure_html(cached_figure("atan"))
    assert "<html>" in html[:200].lower() and html.rstrip().endswith("</html>")
    assert not re.findall(r"<script[^>]*\bsrc=", html)  # nothing loaded from a CDN
    assert len(html) > 1_000_000  # plotly.js itself is inside
    assert "custom gradient" in html


# -- figures are built without plotly's validation: check here that they are valid ----------------------------
@pytest.mark.parametrize("overlay", [False, True])
def test_figures_built_without_validation_are_valid_plotly(overlay):
    """The figure functions skip plotly's per-property validation (it cost ~20x the build); a validated
    copy of each figure must be the same figure, property for property."""
    import plotly.graph_objects as go

    figs = [cached_figure("ste_sign", overlay=overlay), cached_figure("safe_norm", overlay=overlay)]
    sweeps = [cached_sweep("ste_sign", clip_value=c) for c in (0.5, 2.0)]
    figs.append(figures.compare_figure(sweeps, ["a", "b"]))
    for fig in figs:
        validated = go.Figure(fig.to_dict())  # raises on any invalid property
        assert json.loads(validated.to_json()) == json.loads(fig.to_json())


@pytest.mark.parametrize(
    "array",
    [
        np.linspace(-3, 3, 2001, dtype=np.float32),
        np.linspace(-3, 3, 2001),
        np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], dtype=np.float32),
        np.arange(12, dtype=np.float64).reshape(3, 4),
        np.arange(20, dtype=np.float32)[::3],  # not contiguous
        np.arange(5, dtype=">f8"),  # not native
        np.zeros(0, dtype=np.float32),
        np.arange(5, dtype=np.float16),
        np.arange(5, dtype=np.int64),
        np.array(["a", "b"]),
    ],
    ids=lambda a: f"{a.dtype.str}{a.shape}",
)
def test_ready_figure_sends_arrays_as_json_numbers_with_their_values(array):
    """What the browser reads of a ReadyFigure's array: its values as JSON numbers (nested for 2-D), float32 in
    its own shortest decimals, NaN and infinities as null (plotly's JSON), strings as strings."""
    import json

    import plotly.io

    from explorer.ui.widgets import ReadyFigure

    figure = ReadyFigure({"data": [{"type": "scatter", "y": array}], "layout": {}})
    sent = json.loads(plotly.io.to_json(figure.to_dict(), validate=False))["data"][0]["y"]
    if array.dtype.kind in "US":
        assert sent == array.tolist()
        return
    expected = np.where(np.isfinite(array), array, np.nan)
    received = np.array(sent, dtype=float) if array.size else np.zeros(0)  # json null -> nan
    assert received.shape == array.shape
    np.testing.assert_array_equal(received.astype(array.dtype.newbyteorder("=")), expected)
    flat_sent, flat_finite = np.ravel(np.array(sent, dtype=object)), np.ravel(np.isfinite(array))
    assert all(v is None for v, finite in zip(flat_sent, flat_finite, strict=True) if not finite)


def test_plotly_writes_figures_with_orjson():
    """plotly's JSON engine is orjson (requirements.txt): a figure's arrays as compact numbers, float32 in its
    own shortest decimals, in ~0.2 ms for the main figure; the std-lib engine writes 0.10000000149011612."""
    import plotly.io

    assert plotly.io.to_json({"y": np.array([0.1, np.nan], dtype=np.float32)}, validate=False) == '{"y":[0.1,null]}'


@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16", "float64"])
def test_line_arrays_are_float32_exactly_when_that_loses_nothing(dtype):
    """Lines of a float32 / half-precision sweep go out as float32 (half the bytes); their values are the
    sweep's own, exactly. A float64 sweep's x (not float32 numbers) stays float64."""
    result = sweep("atan", dtype=dtype)
    spec = figures.main_figure_spec(result)
    names = {"forward", "true gradient (autodiff)", "custom gradient"}
    lines = [trace for trace in spec["data"] if trace.get("mode") == "lines" and trace["name"] in names]
    assert len(lines) == 3
    for trace in lines:
        assert trace["x"].dtype == (np.float64 if dtype == "float64" else np.float32)
        if dtype != "float64":
            assert trace["y"].dtype == np.float32
        finite = np.isfinite(trace["x"])
        assert set(trace["x"][finite].astype(np.float64)) <= set(result["x"].to_numpy(dtype=np.float64))


def _hinted(data: list[dict], **layout) -> dict | None:
    """The layout a ReadyFigure sends for ``data`` on ``layout``, or None when it sets no data revision."""
    from explorer.ui.widgets import ReadyFigure

    sent = ReadyFigure({"data": data, "layout": {"yaxis": {"range": [-1.0, 1.0]}, **layout}}).to_dict()["layout"]
    return sent if "datarevision" in sent else None


def _line(x0: float, x1: float, **extra) -> dict:
    return {"type": "scatter", "mode": "lines", "x": np.linspace(x0, x1, 50), "y": np.zeros(50), **extra}


def test_an_x_axis_of_lines_gets_their_extent_as_its_range_hint_and_still_autoranges():
    """plotly autoranges an x axis of lines to exactly their extent (no padding): that is the hint; markers
    well inside and outline-free shapes within it change nothing."""
    marker = {"type": "scatter", "mode": "markers", "x": [0.0], "y": [0.0]}
    shade = {"type": "rect", "x0": -3.0, "x1": 3.0, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain", "line": {"width": 0}}
    layout = _hinted([_line(-3.0, 1.0), _line(-1.0, 3.0), marker], shapes=[shade])
    assert layout is not None and layout["xaxis"]["range"] == [-3.0, 3.0] and layout["xaxis"]["autorange"] is True


@pytest.mark.parametrize(
    ("extra_trace", "layout_extra"),
    [
        ({"type": "scatter", "mode": "markers", "x": [2.9], "y": [0.0]}, {}),  # a marker's padding widens the range
        ({"type": "scatter", "x": [2.8, 3.0], "y": [0.0, 0.0]}, {}),  # under 20 points plotly draws markers too
        ({"type": "scatter", "mode": "lines", "x": [0.0, 1.0], "y": [0.0, 1.0], "fill": "tozerox"}, {}),
        (None, {"annotations": [{"x": 3.0, "xref": "x", "xanchor": "left", "showarrow": False, "text": "t"}]}),
        (None, {"annotations": [{"x": -3.0, "xref": "x", "xanchor": "left", "showarrow": True, "text": "t"}]}),  # arrow
        (None, {"shapes": [{"type": "line", "x0": 3.0, "x1": 3.0, "xref": "x", "y0": 0, "y1": 1}]}),  # an outline pads
        (None, {"yaxis": {}}),  # y autoranges with padding: no hint
        (None, {"xaxis": {"type": "log"}}),
    ],
    ids=["marker-at-edge", "short-default-mode", "fill", "note-extends-out", "arrow", "outlined-shape", "y-auto", "log"],
)
def test_no_range_hint_and_no_data_revision_where_plotly_s_autorange_is_not_certain(extra_trace, layout_extra):
    """Where plotly's autorange depends on pixels (padding) or on what the hint does not model, the figure gets no
    data revision: Streamlit's second call then redraws everything, as it did before, and computes the range."""
    data = [_line(-3.0, 3.0)] + ([extra_trace] if extra_trace else [])
    assert _hinted(data, **layout_extra) is None


def test_an_annotation_at_the_low_end_whose_text_extends_inwards_keeps_the_hint():
    """A note anchored at its left, at the axis's low end, pads only to the right (plotly's _xpadminus is 0):
    the Explore figure's "no true gradient" note sits exactly there."""
    note = {"x": -3.0, "xref": "x2", "xanchor": "left", "showarrow": False, "text": "t"}
    data = [_line(-3.0, 3.0), _line(-3.0, 3.0, xaxis="x2", yaxis="y2")]
    layout = _hinted(data, annotations=[note], xaxis2={"matches": "x"}, yaxis2={"range": [0.0, 1.0]})
    assert layout is not None and layout["xaxis"]["range"] == [-3.0, 3.0] and "range" not in layout["xaxis2"]
