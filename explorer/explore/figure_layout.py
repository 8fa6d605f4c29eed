"""The look every figure of the explorer shares, and what is done with a finished figure.

:mod:`explorer.explore.figures` (and the Train page's figures) build their traces; this module holds the
size, margins, font, template and axis style, the one-row panel layout, the unvalidated Figure
(:func:`as_figure`), the app's chart config, standalone HTML and the static images (:func:`write_image`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import plotly.graph_objects as go

FIGURE_HEIGHT = 460  # ~300 px of plot area once title, subplot titles and a two-row legend are in
# Margins wide enough for the y tick labels and a two-row legend below the plots at the default page
# width. Plotly still grows a margin that is too small (autoexpand), but only by drawing the whole
# figure a second time; Streamlit draws a changed figure afresh (its element id hashes the spec), so
# a margin that already fits halves the browser's cost of every slider move (issue 15).
MARGIN = {"l": 88, "r": 24, "t": 92, "b": 120}
FONT = {"family": "Inter, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif", "size": 13, "color": "#1F2430"}


def axis_names(col: int) -> tuple[str, str]:
    """Trace references of panel ``col`` (1-based): ("x", "y"), ("x2", "y2"), ..."""
    suffix = "" if col == 1 else str(col)
    return f"x{suffix}", f"y{suffix}"


# -- layout (plain dicts) -------------------------------------------------------------------------------------
AXIS_STYLE = {
    "zeroline": True,
    "zerolinecolor": "#D0D0D0",
    "showline": True,
    "linecolor": "#BBBBBB",
    "ticks": "outside",
    "tickcolor": "#BBBBBB",
}
TEMPLATE = "plotly_white"


@cache
def template_json() -> str:
    """The ``plotly_white`` template, expanded as plotly writes it into a figure (plotly.js knows no names)."""
    import plotly.io  # noqa: PLC0415

    return json.dumps(plotly.io.templates[TEMPLATE].to_plotly_json())


def base_layout(title: str, subtitle: str) -> dict:
    """The look every figure shares: template, size, font, title and subtitle, legend below, hover."""
    return {
        "template": json.loads(template_json()),  # a fresh copy: a caller may change its figure
        "height": FIGURE_HEIGHT,
        "font": dict(FONT),
        "title": {
            "text": title,
            "subtitle": {"text": subtitle, "font": {"size": 12, "color": "#666"}},
            "x": 0.01,
            "xanchor": "left",
            "y": 0.97,
            "yanchor": "top",
            "font": {"size": 17},
        },
        "margin": dict(MARGIN),
        "legend": {
            "orientation": "h",
            "yanchor": "top",
            "y": -0.2,
            "x": 0.0,
            "xanchor": "left",
            "font": {"size": 12},
            "tracegroupgap": 4,
        },
        "hovermode": "closest",
        "hoverlabel": {"font": {"size": 12}, "align": "left"},
    }


def panels_layout(layout: dict, titles: Sequence[str], spacing: float) -> None:
    """One row of panels sharing one x axis (zoom one, zoom all), each with its title above it: the axes and
    annotations ``make_subplots(rows=1, cols=len(titles), shared_xaxes="all", ...)`` makes, same arithmetic."""
    cols = len(titles)
    width = (1.0 - spacing * (cols - 1)) / cols
    annotations = layout.setdefault("annotations", [])
    for index, text in enumerate(titles):
        col = index + 1
        x_name, y_name = axis_names(col)
        start = sum([width] * index) + index * spacing
        domain = [start, start + width]
        layout[f"xaxis{col if col > 1 else ''}"] = {
            "anchor": y_name,
            "domain": domain,
            **({"matches": "x"} if col > 1 else {}),
            "title": {"text": "x"},
            **AXIS_STYLE,
        }
        layout[f"yaxis{col if col > 1 else ''}"] = {"anchor": x_name, "domain": [0.0, 1.0], **AXIS_STYLE}
        annotations.append(
            {
                "y": 1.0,
                "xref": "paper",
                "x": sum(domain) / 2.0,
                "yref": "paper",
                "text": text,
                "showarrow": False,
                "font": {"size": 14},
                "xanchor": "center",
                "yanchor": "bottom",
            }
        )


def as_figure(spec: dict) -> go.Figure:
    """A :class:`plotly.graph_objects.Figure` of a figure spec (``{"data": [...], "layout": {...}}`` of this
    module), without plotly's per-property validation.

    Validation costs ~20x the build itself; the specs are checked once, by the tests (which build each
    figure again with validation on). ``st.plotly_chart`` would validate a plain dict (``Figure(**dict)``)
    but sends a Figure as it is (``to_dict``).
    """
    return go.Figure(spec, _validate=False)


def chart_config(filename: str) -> dict:
    """The plotly.js config of every figure the app draws: the modebar's camera button downloads an SVG named
    ``<filename>.svg`` (a vector figure for a paper or slides; PNG is plotly's default), and no plotly logo."""
    return {"displaylogo": False, "toImageButtonOptions": {"format": "svg", "filename": filename}}


def figure_html(fig: go.Figure | dict) -> str:
    """A standalone HTML page with plotly.js embedded (the app runs without network: no CDN).
    ``fig`` is a Figure or a spec of this module (:func:`main_figure_spec`)."""
    if isinstance(fig, dict) and {"data", "layout"} <= set(fig):
        fig = as_figure(fig)
    if not isinstance(fig, go.Figure):
        raise ValueError(f"fig must be a plotly.graph_objects.Figure, got {type(fig).__name__}")
    return fig.to_html(include_plotlyjs=True, full_html=True, config=chart_config("figure"))


# -- static images -----------------------------------------------------------------------------------------
IMAGE_FORMATS = ("svg", "png", "pdf")
IMAGES_EXTRA = "pip install 'gradient-explorer[images]'"  # kaleido, plotly's static-image writer
IMAGE_WIDTH = 1100  # pixels, for a figure whose layout sets no width (the three panels side by side)
PNG_SCALE = 2  # a PNG at twice the layout's pixels: sharp on slides and high-density screens


def write_image(fig: go.Figure | dict, path: str | Path) -> Path:
    """Write ``fig`` (a Figure or a spec of this module) to ``path`` as SVG, PNG or PDF, by its suffix.

    Uses kaleido, plotly's static-image writer, which draws the figure in a local Chrome or Chromium. It is
    called here with plotly.js from the plotly package and MathJax off (these figures hold no LaTeX), so
    nothing is fetched from the network; ``Figure.write_image`` would let kaleido load MathJax from a CDN.
    ImportError names the install command when kaleido is missing; RuntimeError says how to get a browser
    when kaleido finds none.
    """
    path = Path(path)
    image_format = path.suffix.lower().removeprefix(".")
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"{path.name}: the file's suffix gives the format; allowed: .{', .'.join(IMAGE_FORMATS)}")
    try:
        import kaleido  # noqa: PLC0415  (optional: the images extra)
        from kaleido.errors import ChromeNotFoundError  # noqa: PLC0415
    except ImportError:
        raise ImportError(
            f"writing {path.name} needs plotly's static-image writer, kaleido (>= 1), and a Chrome or Chromium: "
            f"{IMAGES_EXTRA}. The interactive figure needs neither: fig.write_html(...) or fig.show()."
        ) from None
    figure = as_figure(fig) if isinstance(fig, dict) else fig
    if not isinstance(figure, go.Figure):
        raise ValueError(f"fig must be a plotly.graph_objects.Figure or a figure spec, got {type(fig).__name__}")
    layout = figure.layout
    options = {
        "format": image_format,
        "width": layout.width or IMAGE_WIDTH,
        "height": layout.height or FIGURE_HEIGHT,
        "scale": PNG_SCALE if image_format == "png" else 1,
    }
    try:
        data = kaleido.calc_fig_sync(figure.to_plotly_json(), opts=options, kopts={"mathjax": False})
    except ChromeNotFoundError:
        raise RuntimeError(
            f"kaleido found no Chrome or Chromium to draw {path.name}: install one (apt-get install chromium, or "
            "plotly_get_chrome) or point BROWSER_PATH at its executable"
        ) from None
    path.write_bytes(data)
    return path
