"""A page's view as one HTML file that opens offline in any browser: what a teammate gets in a pull request or a
chat without access to the server.

The file holds the interactive figures (plotly.js written into the file once: no CDN, no request of any kind),
the link that reproduces the view on the server that saved it, the checker's verdict and the page's tables.
:func:`view_html` is pure; the pages call it when someone clicks their "Download this view" button
(``st.download_button`` with a callable: built on the click, in a thread of the server, never on a rerun).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from explorer.explore.figures import chart_config

# A check's level: its text colour and the tint behind its row (the figures' Okabe-Ito hues; grey for a check that
# does not apply), and the order the rows are listed in (failures first; the checker's order within a level).
LEVEL_STYLES = {
    "fail": ("#D55E00", "#FBE3D6"),
    "warn": ("#9A6A00", "#FDF1D8"),
    "skip": ("#5F6368", "#EEEEEE"),
    "pass": ("#007A5A", "#E2F3EC"),
}
LEVEL_ORDER = {"fail": 0, "warn": 1, "skip": 2, "pass": 3}
LINK_SCHEMES = ("http", "https")  # any other link is written as text, never as a link to follow
CELL = "padding:4px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #ddd"


@dataclass(frozen=True)
class Chart:
    """A figure of the view: a plotly Figure or a ``{"data": [...], "layout": {...}}`` spec (NumPy arrays allowed),
    under ``heading``; its camera button saves ``<filename>.svg``."""

    heading: str
    figure: go.Figure | dict
    filename: str = "figure"
    caption: str = ""


@dataclass(frozen=True)
class Table:
    """A table of the view, shown without its index; floats with six significant digits, missing values blank."""

    heading: str
    frame: pd.DataFrame
    caption: str = ""


@dataclass(frozen=True)
class Verdict:
    """The checker's verdict: its :class:`explorer.checker.common.Check` records (anything with ``name``,
    ``level`` and ``message``) and a note said above them (why there are none, what they checked)."""

    checks: tuple = ()
    note: str = ""
    heading: str = "Checks"


def checks_summary(checks: Sequence[Any]) -> str:
    """``"7 checks: 5 pass, 1 warn, 0 fail, 1 skip"``, as ``python -m explorer verify`` counts them."""
    counts = {level: sum(check.level == level for check in checks) for level in LEVEL_ORDER}
    return (
        f"{len(checks)} checks: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail, "
        f"{counts['skip']} skip"
    )


def checks_html(checks: Sequence[Any], summary: str) -> str:
    """The checks as a table, failures first, then warnings, skips (checks that do not apply), passes, each row
    tinted by its level (``data-level`` names it), under ``summary`` in the colour of the verdict. Every text
    escaped."""
    ordered = sorted(checks, key=lambda check: LEVEL_ORDER[check.level])  # stable: the checker's order kept
    rows = []
    for check in ordered:
        colour, background = LEVEL_STYLES[check.level]
        rows.append(
            f'<tr style="background:{background}" data-level="{check.level}">'
            f'<td style="{CELL};font-family:monospace">{html.escape(check.name)}</td>'
            f'<td style="{CELL};color:{colour};font-weight:bold">{check.level}</td>'
            f'<td style="{CELL}">{html.escape(check.message)}</td></tr>'
        )
    colour = LEVEL_STYLES["fail" if any(check.level == "fail" for check in checks) else "pass"][0]
    return (
        '<div class="gradient-explorer-check">'
        f'<p style="color:{colour};font-weight:bold;margin:4px 0">{html.escape(summary)}</p>'
        '<table style="border-collapse:collapse;font-size:13px">'
        f'<thead><tr><th style="{CELL}">check</th><th style="{CELL}">result</th>'
        f'<th style="{CELL}">message</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def _cell(value: Any) -> str:
    """A table cell's text: a float with six significant digits, a missing value (None, NaN) blank."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _table_html(table: Table) -> str:
    body = table.frame.map(_cell).to_html(index=False, border=0, escape=True, classes="data")
    caption = f'<p class="caption">{html.escape(table.caption)}</p>' if table.caption else ""
    return f"<section><h2>{html.escape(table.heading)}</h2>{caption}{body}</section>"


def _chart_html(chart: Chart, index: int) -> str:
    """The figure's div and its ``Plotly.newPlot`` script; plotly.js itself goes into the first one only."""
    figure = chart.figure.to_dict() if isinstance(chart.figure, go.Figure) else chart.figure
    if not (isinstance(figure, dict) and {"data", "layout"} <= set(figure)):
        raise ValueError(f"a chart's figure must be a plotly Figure or a {{'data', 'layout'}} spec, got {type(chart.figure).__name__}")
    div = pio.to_html(
        figure, include_plotlyjs=index == 0, full_html=False, config=chart_config(chart.filename),
        default_width="100%", validate=False, div_id=f"figure-{index}",
    )  # fmt: skip
    caption = f'<p class="caption">{html.escape(chart.caption)}</p>' if chart.caption else ""
    return f"<section><h2>{html.escape(chart.heading)}</h2>{div}{caption}</section>"


LINK_NOTE = (
    "Opens this view in Gradient Explorer on the server that saved this file (you need access to it): every control "
    "is in the link."
)


def _link_html(link: str, note: str) -> str:
    shown = html.escape(link)
    if urlsplit(link).scheme.lower() in LINK_SCHEMES:
        return (
            f'<p class="link"><a id="view-link" href="{html.escape(link, quote=True)}">{shown}</a></p>'
            f'<p class="caption">{html.escape(note)} Everything else in this file works offline.</p>'
        )
    return (
        f'<p class="link"><code id="view-link">{shown}</code></p>'
        '<p class="caption">The server\'s address was not known when this file was saved: put this query after '
        "the address of a Gradient Explorer server. Everything else in this file works offline.</p>"
    )


STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1F2430; margin: 24px auto;
       max-width: 1280px; padding: 0 16px; }
h1 { font-size: 26px; margin-bottom: 4px; } h2 { font-size: 19px; margin: 28px 0 8px; }
.subtitle, .caption, footer { color: #555; font-size: 14px; }
.link { font-size: 15px; word-break: break-all; }
table.data { border-collapse: collapse; font-size: 13px; }
table.data th, table.data td { padding: 4px 8px; text-align: left; border-bottom: 1px solid #ddd; }
table.data th { background: #F4F5F7; }
"""


def view_html(
    title: str,
    link: str,
    charts: Sequence[Chart],
    tables: Sequence[Table] = (),
    verdict: Verdict | None = None,
    subtitle: str = "",
    saved_at: str = "",
    link_note: str = LINK_NOTE,
) -> str:
    """One HTML page of a view: ``title`` and ``subtitle``, the ``link`` that reproduces it (an http(s) URL is a
    link, ``link_note`` under it; anything else is shown as text), the ``charts`` (interactive, plotly.js inlined
    once), the ``verdict`` (none: no checks section) and the ``tables``, in that order; ``saved_at`` in the footer.
    Every text is escaped. ValueError for a view with no chart."""
    if not charts:
        raise ValueError("a view needs at least one chart")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<header><h1>{html.escape(title)}</h1>",
        f'<p class="subtitle">{html.escape(subtitle)}</p>' if subtitle else "",
        "</header><section><h2>Reproduce this view</h2>",
        _link_html(link, link_note),
        "</section>",
    ]
    parts += [_chart_html(chart, index) for index, chart in enumerate(charts)]
    if verdict is not None:
        parts.append(f'<section id="checks"><h2>{html.escape(verdict.heading)}</h2>')
        if verdict.note:
            parts.append(f'<p class="caption">{html.escape(verdict.note)}</p>')
        if verdict.checks:
            parts.append(checks_html(verdict.checks, checks_summary(verdict.checks)))
        parts.append("</section>")
    parts += [_table_html(table) for table in tables]
    saved = f" on {html.escape(saved_at)}" if saved_at else ""
    parts.append(
        f"<footer><p>Saved from Gradient Explorer{saved}. The figures are interactive: hover for values, drag to "
        "zoom, double-click to reset; the camera button saves a figure as SVG.</p></footer></body></html>"
    )
    return "\n".join(part for part in parts if part)
