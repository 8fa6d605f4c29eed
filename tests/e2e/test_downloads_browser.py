"""Figures for a paper, in a real browser: the camera button of a chart saves an SVG, and the notebook's
``plot(..., save=...)`` writes SVG, PNG and PDF through kaleido in this Chromium."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import explorer
from explorer.explore import figures

pytestmark = pytest.mark.e2e

SVG = "{http://www.w3.org/2000/svg}"
LEGEND_NAMES_JS = """(key) => document.querySelector('.st-key-' + key + ' .js-plotly-plot')._fullData
  .filter((t) => t.showlegend && t.visible === true).map((t) => t.name)"""


def _texts(path: Path) -> set[str]:
    root = ET.parse(path).getroot()  # raises on anything that is not well-formed XML
    assert root.tag == f"{SVG}svg"
    return {"".join(element.itertext()) for element in root.iter(f"{SVG}text")}


def test_the_camera_button_saves_an_svg_with_the_traces_names(app, tmp_path):
    app.open(query={"op": "atan", "p.alpha": "3"})
    app.wait_figure()
    legend = set(app.page.evaluate(LEGEND_NAMES_JS, "main_figure"))
    assert {"forward", "true gradient (autodiff)", "custom gradient"} <= legend
    chart = app.page.locator(".st-key-main_figure .js-plotly-plot")
    chart.hover()
    camera = chart.locator('.modebar-btn[data-title="Download plot"]')
    with app.page.expect_download(timeout=60_000) as info:
        camera.click()
    download = info.value
    assert download.suggested_filename == "atan.svg"
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    texts = _texts(path)
    assert legend <= texts
    assert "Forward" in texts and "Custom gradient" in texts  # the panel titles


def test_the_notebook_writes_svg_png_and_pdf_through_kaleido(chromium_path, monkeypatch, tmp_path):
    monkeypatch.setenv("BROWSER_PATH", chromium_path)  # kaleido draws in the same Chromium
    figure = explorer.plot("atan", n=401, save=tmp_path / "atan.svg")
    names = {trace.name for trace in figure.data if trace.showlegend is not False and trace.name}
    assert {"forward", "custom gradient"} <= names
    assert names <= _texts(tmp_path / "atan.svg")

    compare = explorer.plot(["atan", "sigmoid"], n=401, save=tmp_path / "compare.png")
    png = (tmp_path / "compare.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk: twice the layout's pixels
    assert (width, height) == (2 * figures.IMAGE_WIDTH, 2 * (compare.layout.height or figures.FIGURE_HEIGHT))

    results = explorer.train.compare("xor", ["ste_sign"], epochs=3)
    explorer.plot_training(results, save=tmp_path / "loss.pdf")
    assert (tmp_path / "loss.pdf").read_bytes()[:5] == b"%PDF-"
