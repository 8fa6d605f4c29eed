"""Figures for a paper and a view for a teammate, in a real browser: the camera button of a chart saves an SVG,
the downloaded HTML view of Explore and Train opens from a file:// URL with every request but file:// blocked and
draws the page's traces, and the notebook's ``plot(..., save=...)`` writes SVG, PNG and PDF through kaleido in
this Chromium."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

import explorer
from explorer.explore import figures
from explorer.ui import train as train_page
from tests.e2e.conftest import ARTIFACTS, SETTLE_SECONDS
from tests.view_file import read_view

pytestmark = pytest.mark.e2e

SVG = "{http://www.w3.org/2000/svg}"
TRAINING_SECONDS = 240  # a bound for a hang only: 20 epochs are one tick
# The same fingerprint as harness.FIGURE_JS (names, points, sums of finite x and y), of a plotly div by its id.
DIV_FIGURE_JS = """(id) => {
  const plot = document.getElementById(id);
  if (!plot || !plot._fullData) return null;
  const sum = (values) => Array.from(values || []).reduce((a, v) => (Number.isFinite(v) ? a + v : a), 0);
  return {traces: plot._fullData.map((t) => ({name: t.name, n: (t.y || []).length, xsum: sum(t.x), ysum: sum(t.y)}))};
}"""
LEGEND_NAMES_JS = """(key) => document.querySelector('.st-key-' + key + ' .js-plotly-plot')._fullData
  .filter((t) => t.showlegend && t.visible === true).map((t) => t.name)"""


def _texts(path: Path) -> set[str]:
    root = ET.parse(path).getroot()  # raises on anything that is not well-formed XML
    assert root.tag == f"{SVG}svg"
    return {"".join(element.itertext()) for element in root.iter(f"{SVG}text")}


def _download(app, button_name: str, directory: Path, timeout_s: float = 120) -> Path:
    with app.page.expect_download(timeout=timeout_s * 1000) as info:
        app.page.get_by_role("button", name=button_name).click()
    download = info.value
    path = directory / download.suggested_filename
    download.save_as(path)
    return path


def _open_offline(browser, path: Path, figures: int):
    """A fresh browser context that lets only file:// through, on ``path``; returns (page, blocked URLs)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []

    def only_files(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", only_files)
    page = context.new_page()
    page.goto(path.as_uri())
    page.wait_for_function(
        f"(count) => Array.from({{length: count}}, (_, i) => ({DIV_FIGURE_JS})('figure-' + i)).every((f) => f !== null)",
        arg=figures, timeout=SETTLE_SECONDS * 1000,
    )  # fmt: skip
    return page, blocked


def _same_traces(offline: dict, online: dict) -> None:
    assert [t["name"] for t in offline["traces"]] == [t["name"] for t in online["traces"]]
    for mine, theirs in zip(offline["traces"], online["traces"], strict=True):
        assert mine["n"] == theirs["n"], mine["name"]
        assert mine["xsum"] == pytest.approx(theirs["xsum"], rel=1e-6, abs=1e-6), mine["name"]
        assert mine["ysum"] == pytest.approx(theirs["ysum"], rel=1e-6, abs=1e-6), mine["name"]


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


def test_the_explore_view_opens_offline_and_draws_the_page_traces(app, browser, tmp_path):
    app.open(query={"op": "atan", "p.alpha": "3", "lo": "-2", "hi": "2"})
    main, compare = app.wait_figure(), app.wait_figure("compare_figure")
    page_url = urlsplit(app.page.url)
    path = _download(app, "Download this view (HTML)", tmp_path)
    assert path.name == "atan_view.html"

    offline, blocked = _open_offline(browser, path, figures=2)
    try:
        _same_traces(offline.evaluate(DIV_FIGURE_JS, "figure-0"), main)
        _same_traces(offline.evaluate(DIV_FIGURE_JS, "figure-1"), compare)
        offline.screenshot(path=str(ARTIFACTS / "downloaded_view_explore.png"), full_page=True)
        assert blocked == []  # it asked for nothing beyond its own file
        view = read_view(path.read_text(encoding="utf-8"))
        link = urlsplit(view.links[0])
        # the server's address as this browser sees it, with the page's own query
        assert (link.scheme, link.netloc) == (page_url.scheme, page_url.netloc)
        assert parse_qs(link.query) == parse_qs(page_url.query)
        assert [name for _, name, _ in view.check_rows] and "fail" not in {level for level, _, _ in view.check_rows}
        assert [float(row[0]) for row in view.tables["Special points"][1:]] == [0.0]
    finally:
        offline.context.close()


def test_the_train_view_opens_offline_and_draws_the_page_loss_curves(app, browser, tmp_path):
    app.open(query={"op": "atan"})
    app.wait_figure()
    app.page.get_by_test_id("stSidebarNav").get_by_role("link", name="Train").click()
    start = app.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True)
    start.wait_for()
    app.settle()
    epochs = app.page.get_by_test_id("stSidebar").get_by_role("spinbutton", name="Epochs", exact=True)
    epochs.fill("20")
    epochs.press("Enter")
    app.settle()
    start.click()
    app.page.get_by_role("heading", name="Results").wait_for(timeout=TRAINING_SECONDS * 1000)
    app.settle()
    loss = app.wait_figure("train.loss_chart")
    assert [t["n"] for t in loss["traces"]] == [20, 20]
    path = _download(app, "Download this view (HTML)", tmp_path)

    offline, blocked = _open_offline(browser, path, figures=3)
    try:
        _same_traces(offline.evaluate(DIV_FIGURE_JS, "figure-0"), loss)
        offline.screenshot(path=str(ARTIFACTS / "downloaded_view_train.png"), full_page=True)
        assert blocked == []
        view = read_view(path.read_text(encoding="utf-8"))
        link, page_url = urlsplit(view.links[0]), urlsplit(app.page.url)
        assert (link.netloc, link.path) == (page_url.netloc, "/train")
        # every control of the page, as its URL has them; not the id of the run in this server's memory (a link
        # opened later, elsewhere, trains again rather than being told that run is lost)
        assert parse_qs(link.query) == {k: v for k, v in parse_qs(page_url.query).items() if k != train_page.RUN_URL_KEY}
        assert [row[0] for row in view.tables["Results"][1:]] == [t["name"] for t in loss["traces"]]
    finally:
        offline.context.close()


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

    results = explorer.train.compare(task="xor", runs=["ste_sign"], epochs=3)
    explorer.plot_training(results, save=tmp_path / "loss.pdf")
    assert (tmp_path / "loss.pdf").read_bytes()[:5] == b"%PDF-"
