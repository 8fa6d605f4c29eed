"""Small pieces more than one page shows the same way."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np
import pyarrow as pa
import streamlit as st
from plotly.basedatatypes import BaseFigure

import ops
from explorer.explore.figures import chart_config


def show_formulas(spec: ops.OpSpec) -> None:
    """Forward and custom gradient side by side, in LaTeX."""
    col_forward, col_grad = st.columns(2)
    with col_forward:
        st.markdown("**Forward** (autodiff of this is the true gradient)")
        st.latex(spec.forward_tex)
    with col_grad:
        st.markdown("**Custom gradient** $g(x)$, backward $= dy \\cdot g(x)$")
        st.latex(spec.grad_tex)


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]$~])")


def literal(text: str) -> str:
    """``text`` escaped so that st.error / st.warning (which render Markdown) show it verbatim:
    a parser message quoting ``__import__`` or a URL value like ``**x**`` stays as typed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text))


def arrow_table(columns: Mapping[str, Sequence[Any] | np.ndarray]) -> pa.Table:
    """A table for ``st.dataframe(..., hide_index=True)`` made straight from its columns (name: NumPy array
    or list), for a cached table shown on every rerun.

    ``st.dataframe`` converts a pandas frame to Arrow on every call (~1 ms for a small table, and
    building the frame costs as much again); an Arrow table it sends as it is. This one has the column
    names, types and values Streamlit makes of a pandas frame of the same columns (strings as
    ``large_string``, like pandas' ``str`` columns; ``tests/test_explore_page.py`` checks that), without
    pandas' index metadata, which a hidden index does not use. Immutable: safe to share from
    ``st.cache_resource``.
    """
    return pa.table({name: _arrow_column(values) for name, values in columns.items()})


def _arrow_column(values: Sequence[Any] | np.ndarray) -> pa.Array:
    if isinstance(values, np.ndarray) and values.dtype != object:
        return pa.array(values)
    values = list(values)
    if values and all(isinstance(value, str) for value in values):
        return pa.array(values, type=pa.large_string())
    return pa.array(values)


class ReadyFigure(BaseFigure):
    """A figure spec of :mod:`explorer.explore.figures` (plain dicts) prepared once to be sent by :func:`show_figure`:
    themed as Streamlit would theme it (:func:`_themed`), its arrays NumPy arrays that plotly's orjson engine
    writes as JSON numbers, and, when every axis has a range (:func:`_with_range_hints`), ``layout.datarevision``
    a digest of the traces' arrays and lists: Streamlit's second plotly call then restyles instead of redrawing
    everything.

    ``st.plotly_chart`` turns what it is given into a dict before writing the JSON
    (``plotly.tools.return_figure_from_figure_or_data``): a plain dict is validated property by property
    (it builds a ``Figure`` from it: ~40 ms for the main figure), a plotly ``Figure`` is deep-copied and
    its arrays base64-encoded (``to_dict``) on every rerun, cached or not. A ReadyFigure passes the
    ``BaseFigure`` test and its ``to_dict`` returns the prepared spec, so a cached figure costs a rerun only
    the JSON writing (orjson: ~0.3 ms for the main figure). Numbers, not plotly's base64 typed arrays:
    plotly.js decodes a typed array anew on every call, so each call would see new data and redraw it all.
    It holds no plotly object tree (``BaseFigure.__init__`` is not run, so use :func:`explorer.explore.figures.as_figure`
    of :attr:`spec` for a real Figure) and is read-only: safe to share from ``st.cache_resource``.
    ``tests/test_explore_page.py`` checks what the page sends, so a Streamlit that stops calling ``to_dict``
    fails a test, not a user.
    """

    def __init__(self, spec: dict) -> None:  # noqa: D107  (no BaseFigure.__init__: no object tree)
        themed = _themed(spec)
        digest = hashlib.blake2b(digest_size=8)
        data, layout = _with_sendable_arrays(themed["data"], digest), _with_sendable_arrays(themed["layout"])
        sendable = {"data": data, "layout": layout}
        if _with_range_hints(sendable["layout"], sendable["data"]):
            sendable["layout"]["datarevision"] = digest.hexdigest()
        object.__setattr__(self, "_spec", spec)  # BaseFigure.__setattr__ takes only plotly properties
        object.__setattr__(self, "_sendable", sendable)

    @property
    def spec(self) -> dict:
        """The figure spec as :mod:`explorer.explore.figures` made it (NumPy arrays, plotly_white template)."""
        return self._spec

    def to_dict(self) -> dict:
        return dict(self._sendable)  # a new outer dict; the parts are never changed

    def __repr__(self) -> str:
        return f"ReadyFigure({len(self.spec['data'])} traces)"


# What st.plotly_chart(theme="streamlit") merges into a figure's template.layout in Streamlit 1.67 with this
# app's theme (.streamlit/config.toml, light): the frontend's Plotly theme (PlotlyChart's applyStreamlitTheme,
# colours and sizes as that theme resolves them). Only the parts a cartesian scatter figure reads: the
# ternary axes, colour axes and range selectors it also sets are left out, and so is the axes' ``minor``
# gridcolor: written into a layout (not a template) a ``minor`` container turns minor ticks on.
# tests/e2e/test_figure_theme.py draws figures both ways in Chromium and checks that plotly resolves the same
# layout and traces and draws the same pixels.
_FONT_FAMILY = '"Source Sans", sans-serif, "Source Sans", sans-serif'
_GREY = "#808495"
_LINE = "#e6eaf1"
STREAMLIT_THEME_LAYOUT: dict = {
    "font": {"color": _GREY, "family": _FONT_FAMILY, "size": 12, "weight": 400},
    "title": {
        "font": {"family": _FONT_FAMILY, "size": 16, "color": "#1f2430"},
        "pad": {"l": 4},
        "xanchor": "left",
        "x": 0,
    },
    "legend": {
        "title": {"font": {"size": 12, "color": _GREY}, "side": "top"},
        "valign": "top",
        "bordercolor": "transparent",
        "borderwidth": 0,
        "font": {"size": 12, "color": "#262730"},
    },
    "paper_bgcolor": "#ffffff",
    "plot_bgcolor": "#ffffff",
    "yaxis": {
        "ticklabelposition": "outside",
        "zerolinecolor": _LINE,
        "title": {"font": {"color": _GREY, "size": 14}, "standoff": 24},
        "tickcolor": _LINE,
        "tickfont": {"color": _GREY, "size": 12},
        "gridcolor": _LINE,
        "automargin": True,
    },
    "xaxis": {
        "zerolinecolor": _LINE,
        "gridcolor": _LINE,
        "showgrid": False,
        "tickfont": {"color": _GREY, "size": 12},
        "tickcolor": _LINE,
        "title": {"font": {"color": _GREY, "size": 14}, "standoff": 20},
        "zeroline": False,
        "automargin": True,
    },
    "margin": {"pad": 8, "r": 0, "l": 0},
    "hoverlabel": {
        "bgcolor": "#ffffff",
        "bordercolor": "rgba(31, 36, 48, 0.2)",
        "font": {"color": _GREY, "family": _FONT_FAMILY, "size": 12},
    },
}
# template.layout keys plotly applies to the layout attribute of the same name (the axes, annotations and
# shapes are applied item by item below); the rest of a template concerns subplots these figures never have.
_TEMPLATE_LAYOUT_KEYS = (
    "autotypenumbers", "colorscale", "colorway", "font", "hoverlabel", "hovermode", "legend", "margin",
    "paper_bgcolor", "plot_bgcolor", "title",
)  # fmt: skip
_AXIS_KEY = re.compile(r"^([xy])axis(\d*)$")


def _merged(base: Any, over: Any) -> Any:
    """``over`` deep-merged onto ``base`` (``over`` wins; dicts merged key by key, as lodash's merge and
    plotly's templates do); new dicts, neither input changed."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(base[key], value) if key in base else value
    return out


def _cartesian_axes(layout: dict, data: Sequence[dict]) -> set[str]:
    """Every cartesian axis the figure draws: those of its layout and those its traces name ("x2" -> "xaxis2")."""
    names = {key for key in layout if _AXIS_KEY.match(key)}
    for trace in data:
        for letter in "xy":
            ref = trace.get(f"{letter}axis", letter)
            names.add(f"{letter}axis{ref[1:]}")
    return names


def _themed(spec: dict) -> dict:
    """``spec`` as ``st.plotly_chart(theme="streamlit")`` draws it, with no template left: Streamlit's theme merged
    onto the spec's template (:data:`STREAMLIT_THEME_LAYOUT`), then the template's values written into the
    layout, each axis, annotation and shape, and each trace, under what the spec sets itself; the title in
    bold, as Streamlit's theme sets it.

    Why: Streamlit remounts a chart whose figure changed and then hands plotly a JSON copy of it (its theme
    and its width, measured after mounting). For plotly.js a copied template is a changed template, so that
    second call redrew the whole figure (~50 ms for the main figure in this machine's Chromium); without one,
    and with ``layout.datarevision`` saying the data are the same, it only restyles (~10 ms).
    """
    layout = dict(spec["layout"])
    titled = layout.get("title") is not None  # Streamlit bolds a title the figure has, and adds none
    template = layout.pop("template", None) or {}
    defaults = _merged(template.get("layout", {}), STREAMLIT_THEME_LAYOUT)
    for key in _TEMPLATE_LAYOUT_KEYS:
        if key in defaults:
            layout[key] = _merged(defaults[key], layout[key]) if key in layout else defaults[key]
    for name in _cartesian_axes(layout, spec["data"]):
        own = layout.get(name, {})
        layout[name] = _merged(defaults.get(f"{name[0]}axis", {}), own)
        if "showline" not in own and not {"linecolor", "linewidth"} & set(own):
            layout[name]["showline"] = False  # plotly draws an axis line the layout (not a template) colours
    for items, item_defaults in (("annotations", "annotationdefaults"), ("shapes", "shapedefaults")):
        if items in layout and item_defaults in defaults:
            layout[items] = [_merged(defaults[item_defaults], item) for item in layout[items]]
    if titled:
        title = layout["title"] if isinstance(layout["title"], dict) else {"text": layout["title"]}
        layout["title"] = {**title, "text": f"<b>{title.get('text', '')}</b>"}
    trace_defaults = template.get("data", {})
    seen: dict[str, int] = {}
    data = []
    for trace in spec["data"]:
        kind = trace.get("type", "scatter")
        candidates = trace_defaults.get(kind) or [{}]
        data.append(_merged(candidates[seen.get(kind, 0) % len(candidates)], trace))
        seen[kind] = seen.get(kind, 0) + 1
    return {"data": data, "layout": layout}


# The part of an axis's span, at each end, where a marker, text or annotation may widen plotly's autorange
# (its padding: 5 % of the axis's length plus the marker's radius, in pixels; ~2 % for a 300-pixel panel).
_AUTORANGE_EDGE = 0.1


class _NotNumeric(Exception):
    """An axis with other than numbers on it (categories, dates): no range hint."""


def _finite(values: Any) -> np.ndarray:
    try:
        listed = [np.nan if v is None else v for v in values] if isinstance(values, list) else values
        array = np.asarray(listed, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise _NotNumeric from error
    return array[np.isfinite(array)]


def _with_range_hints(layout: dict, data: Sequence[dict]) -> bool:
    """Give each x axis that plotly autoranges, where the result is certain, that range as a hint (kept with
    ``autorange: True``, so plotly still computes it): the extent of its line traces and outline-free shapes,
    when every marker, text and other shape sits well inside, and every annotation too, except on the side its
    text does not extend to. Returns whether every axis of the figure has a range now.

    Why: Streamlit's second plotly call uses a copy of the figure that it may take before the first draw wrote
    the computed ranges into the layout. With a data revision plotly does not recompute them then, and an axis
    with no range in the copy gets plotly's default, [-1, 6]. A ReadyFigure sets a data revision only when
    every axis has a range (:class:`ReadyFigure`); otherwise that call redraws everything, as it did before.
    """
    try:
        return all(_with_range_hint(layout, data, name) for name in sorted(_cartesian_axes(layout, data)))
    except _NotNumeric:
        return False


def _with_range_hint(layout: dict, data: Sequence[dict], name: str) -> bool:
    """:func:`_with_range_hints` for the axis ``name`` ("xaxis2"): whether it has a range now."""
    axis = layout[name]
    if "range" in axis or axis.get("matches"):  # a matching axis shows the range of the axis it matches
        return True
    if name[0] != "x" or axis.get("type", "-") not in ("-", "linear"):
        return False  # y autoranges with padding (lines too); log and date axes count in other units
    ref = "x" + name[len("xaxis") :]
    group = {ref} | {
        "x" + key[len("xaxis") :]
        for key, other in layout.items()
        if _AXIS_KEY.match(key) and isinstance(other, dict) and other.get("matches") == ref
    }
    lines: list[np.ndarray] = []  # values plotly's autorange spans exactly
    inner: list[np.ndarray] = []  # values that must sit away from both ends
    from_low: list[np.ndarray] = []  # values that may sit at the low end (they extend only upwards)
    from_high: list[np.ndarray] = []
    for trace in data:
        if trace.get("xaxis", "x") not in group or trace.get("visible") in (False, "legendonly"):
            continue
        if trace.get("type", "scatter") != "scatter" or trace.get("fill", "none") != "none" or trace.get("error_x"):
            return False
        mode = trace.get("mode", "lines+markers" if len(trace.get("x", [])) < 20 else "lines")  # plotly's default
        (lines if mode == "lines" else inner).append(_finite(trace.get("x", [])))
    for shape in (s for s in layout.get("shapes", []) if s.get("xref") in group):
        edges = _finite([shape.get("x0"), shape.get("x1")])  # with no outline a shape adds no padding
        (lines if shape.get("line", {}).get("width", 1) == 0 else inner).append(edges)
    for note in (a for a in layout.get("annotations", []) if a.get("xref") in group):
        # its text box pads the range only on the side it extends to (plotly's _xpadminus, _xpadplus)
        side = {"left": from_low, "right": from_high}.get(note.get("xanchor"), inner)
        (inner if note.get("showarrow") is not False else side).append(_finite([note.get("x")]))
    extent = np.concatenate(lines) if lines else np.zeros(0)
    if extent.size == 0 or extent.min() == extent.max():
        return False
    lo, hi = float(extent.min()), float(extent.max())
    margin = _AUTORANGE_EDGE * (hi - lo)
    bounds = [(lo + margin, hi - margin, inner), (lo, hi - margin, from_low), (lo + margin, hi, from_high)]
    if any(v.size and (v.min() < low or v.max() > high) for low, high, values in bounds for v in values):
        return False
    layout[name] = {**axis, "range": [lo, hi], "autorange": True}
    return True


def _sendable(array: np.ndarray) -> np.ndarray:
    """A NumPy array orjson writes as JSON numbers: native float32/float64 (other floats widened; float32
    keeps its shortest decimals, "-2.997", half the characters of float64's)."""
    if array.dtype.kind == "f" and array.dtype not in (np.float32, np.float64):
        return array.astype(np.float64)
    return array.astype(array.dtype.newbyteorder("=")) if not array.dtype.isnative else array


def _with_sendable_arrays(value: Any, digest: Any = None) -> Any:
    """A copy of ``value`` with every NumPy array made :func:`_sendable`. With a ``digest``, every array and
    every list of values (a trace's ``text``, a legend entry's ``[None]``) is fed to it: what plotly.react
    no longer compares once a figure has a data revision."""
    if isinstance(value, np.ndarray):
        array = _sendable(value)
        if digest is not None:
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            # an object array's bytes are pointers: its values go in as text
            values = repr(array.tolist()).encode() if array.dtype.kind == "O" else np.ascontiguousarray(array).tobytes()
            digest.update(values)
        return array
    if isinstance(value, dict):
        return {name: _with_sendable_arrays(item, digest) for name, item in value.items()}
    if isinstance(value, list):
        nested = (dict, list, np.ndarray)
        if digest is not None and not any(isinstance(item, nested) for item in value):
            digest.update(repr(value).encode())
        return [_with_sendable_arrays(item, digest) if isinstance(item, nested) else item for item in value]
    return value


def show_figure(figure: ReadyFigure, key: str, filename: str | None = None, **kwargs: Any) -> None:
    """``st.plotly_chart`` of a :class:`ReadyFigure`, which carries Streamlit's theme itself (``theme=None``); its
    camera button saves ``<filename>.svg`` (default: the key), as every chart's does (:func:`show_chart`)."""
    st.plotly_chart(figure, key=key, theme=None, config=chart_config(filename or key.replace(".", "_")), **kwargs)


def show_chart(figure: BaseFigure, key: str, filename: str | None = None, **kwargs: Any) -> None:
    """``st.plotly_chart`` of a plotly Figure in Streamlit's theme, its camera button saving ``<filename>.svg``
    (default: the key). Every chart of the pages goes through here or :func:`show_figure`
    (``tests/test_downloads.py`` checks that no page calls ``st.plotly_chart`` itself)."""
    st.plotly_chart(figure, key=key, config=chart_config(filename or key.replace(".", "_")), **kwargs)


def page_link(query: Mapping[str, str], page: str = "") -> str:
    """The address that reproduces a page's view: the page as the browser sees it (``st.context.url``: scheme,
    host, port and any path a proxy adds, without the query) with ``query``. Without a browser (AppTest, a client
    that does not report its URL) the server's own port on localhost, with ``page`` (its ``url_path``)."""
    base = st.context.url or f"http://localhost:{st.get_option('server.port')}/{page}"
    base = base if urlsplit(base).path else f"{base}/"  # the root page: "http://host:port/", as a browser shows it
    return f"{base}?{urlencode(query, safe=',:')}" if query else base

