"""Reading a downloaded view (:func:`explorer.explore.view_html.view_html`) back, with the standard library's HTML
parser and JSON decoder only: its scripts, link, headings, tables, check rows and each figure's
``Plotly.newPlot`` arguments."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import numpy as np


@dataclass
class ViewFile:
    scripts: list[dict] = field(default_factory=list)  # each <script>: its attributes and its text
    links: list[str] = field(default_factory=list)  # every <a href>
    link_text: str = ""  # the text of the element with id="view-link"
    headings: list[str] = field(default_factory=list)  # <h1> and <h2>, in order
    tables: dict[str, list[list[str]]] = field(default_factory=dict)  # rows (header first) under each <h2>
    check_rows: list[tuple[str, str, str]] = field(default_factory=list)  # (data-level, check, message)
    figures: list[dict] = field(default_factory=list)  # {"id", "data", "layout", "config"} of each newPlot


class _Parser(HTMLParser):
    def __init__(self, view: ViewFile):
        super().__init__(convert_charrefs=True)
        self.view = view
        self.heading: str | None = None
        self.text: list[str] | None = None  # collecting the text of the current h1/h2/script/td/th/view-link
        self.tag = ""
        self.script_attrs: dict = {}
        self.row: list[str] | None = None
        self.level: str | None = None
        self.table_rows: list[list[str]] | None = None
        self.in_checks = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h1", "h2", "script", "td", "th") or attrs.get("id") == "view-link":
            self.text, self.tag = [], ("view-link" if attrs.get("id") == "view-link" else tag)
            self.script_attrs = attrs if tag == "script" else {}
        if tag == "a" and "href" in attrs:
            self.view.links.append(attrs["href"])
        if tag == "div" and attrs.get("class") == "gradient-explorer-check":
            self.in_checks = True
        if tag == "table" and not self.in_checks and self.heading is not None:
            self.table_rows = self.view.tables.setdefault(self.heading, [])
        if tag == "tr":
            self.row, self.level = [], attrs.get("data-level")

    def handle_endtag(self, tag):
        if self.text is not None and tag in ("h1", "h2", "script", "td", "th", "a", "code") and (
            tag == self.tag or self.tag == "view-link"
        ):
            text = "".join(self.text)
            if self.tag in ("h1", "h2"):
                self.view.headings.append(text.strip())
                self.heading = text.strip()
            elif self.tag == "script":
                self.view.scripts.append({"attrs": self.script_attrs, "text": text})
            elif self.tag == "view-link":
                self.view.link_text = text.strip()
            elif self.row is not None:
                self.row.append(text.strip())
            self.text = None
        if tag == "tr" and self.row is not None:
            if self.in_checks and self.level is not None:
                self.view.check_rows.append((self.level, self.row[0], self.row[2]))
            elif self.table_rows is not None:
                self.table_rows.append(self.row)
            self.row = None
        if tag == "table":
            self.table_rows = None
            self.in_checks = False

    def handle_data(self, data):
        if self.text is not None:
            self.text.append(data)


def _new_plots(script: str) -> list[dict]:
    decoder = json.JSONDecoder()
    found = []
    for match in re.finditer(r"Plotly\.newPlot\(\s*", script):
        values, index = [], match.end()
        for _ in range(4):  # the div's id, data, layout, config
            value, index = decoder.raw_decode(script, index)
            values.append(value)
            index = re.compile(r"\s*,?\s*").match(script, index).end()
        found.append(dict(zip(("id", "data", "layout", "config"), values, strict=True)))
    return found


def read_view(page: str) -> ViewFile:
    view = ViewFile()
    _Parser(view).feed(page)
    for script in view.scripts:
        view.figures += _new_plots(script["text"])
    return view


def values(trace: dict, axis: str) -> np.ndarray:
    """A trace's ``x`` or ``y`` as floats (None as NaN), from a list or plotly's base64 typed array."""
    raw = trace[axis]
    if isinstance(raw, dict):
        return np.frombuffer(base64.b64decode(raw["bdata"]), dtype=np.dtype(raw["dtype"])).astype(float)
    return np.array([np.nan if v is None else v for v in raw], dtype=float)


def recording_downloads(monkeypatch) -> dict[str, object]:
    """From now on in this test: file name -> the data each download button of a page run was given (for a
    deferred file, the callable that makes it), recorded as Streamlit marshals the button."""
    from streamlit.elements.widgets import button

    given: dict[str, object] = {}
    original = button.marshall_file

    def recording(coordinates, data, proto, mimetype, file_name=None, **kwargs):
        given[file_name] = data
        return original(coordinates, data, proto, mimetype, file_name, **kwargs)

    monkeypatch.setattr(button, "marshall_file", recording)
    return given
