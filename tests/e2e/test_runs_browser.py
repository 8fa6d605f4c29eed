"""The Runs page in a real browser, on a run written while the test watches (issue 47's "Done when").

A writer subprocess (:mod:`tests.e2e.runs_writer`) trains a real ``model.fit`` with the Watch callback when
``explorer.watch.callback`` is importable (the ``watch`` branch merged), and otherwise appends the same records
with the run folder's writer in a loop; the test names which in its output. The browser sees the run appear in
the list, opens it, sees its figures grow while it is written (the view's fragment refreshes itself), moves the
step slider, opens the layer in Explore, and reopens the copied link to the same view. Every wait waits for a
state (bounded); the writer records until the test tells it to stop, so the machine's speed does not matter.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from explorer import serve
from explorer.bench import harness
from tests.e2e.conftest import ARTIFACTS, App

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUN = "e2e-live"
WAIT_MS = 180_000  # a hang only: every wait below polls for a state
HAS_CALLBACK = importlib.util.find_spec("explorer.watch.callback") is not None
WRITER = "fit" if HAS_CALLBACK else "synthetic"

LOSS_POINTS_JS = """() => {
  const plot = document.querySelector('.st-key-runs-loss .js-plotly-plot');
  if (!plot || !plot._fullData || !plot._fullData.length) return 0;
  return plot._fullData[0].x.length;
}"""
SUBHEADER_JS = """() => {
  const found = [...document.querySelectorAll('h3')].map((h) => h.innerText.trim()).find((t) => t.includes(' at step '));
  return found || '';
}"""


@pytest.fixture(scope="module")
def runs_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e-runs") / "runs"
    root.mkdir()
    with harness.serve_app(log_path=ARTIFACTS / "streamlit_runs.log", env={serve.RUNS_ENV: str(root)}) as server:
        yield server, root


@pytest.fixture
def writer(runs_server, tmp_path):
    _, root = runs_server
    stop_file = tmp_path / "stop"
    log = open(ARTIFACTS / "runs_writer.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "e2e" / "runs_writer.py"), WRITER, str(root), RUN, str(stop_file)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    print(f"runs writer: {WRITER} ({'model.fit with the Watch callback' if HAS_CALLBACK else 'run_folder writer in a loop'})")
    yield process, stop_file
    stop_file.touch()
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    log.close()


def _wait_until(condition, what: str) -> None:
    """Poll ``condition`` (the list is a canvas grid, read cell by cell) until true, at most WAIT_MS."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_MS / 1000:g} s for {what}")
        time.sleep(0.5)


def _step_of(subheader: str) -> int:
    return int(subheader.rsplit(" at step ", 1)[1].replace(",", ""))


def test_a_run_appears_grows_moves_opens_in_explore_and_its_link_reopens(browser, runs_server, writer):
    server, _ = runs_server
    process, stop_file = writer
    context = browser.new_context(viewport=harness.VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    app = App(page, server.url)
    try:
        app.open("runs")
        # the run appears in the list (the list's fragment refreshes itself)
        _wait_until(lambda: any(row and row[0] == RUN for row in app.grid_rows(0)), "the run in the list")
        box = page.get_by_test_id("stSelectbox").filter(has_text="Open a run").locator("input")
        box.click()
        page.get_by_role("option", name=RUN).first.click()
        app.settle()
        page.wait_for_function(f"() => ({LOSS_POINTS_JS})() > 0", timeout=WAIT_MS)
        assert "step" not in app.query()  # at the newest step: following the run
        first_points = page.evaluate(LOSS_POINTS_JS)
        # read as one value when it is there: the live fragment redraws the subheader while the run grows
        shown_step = f"() => {{ const t = ({SUBHEADER_JS})(); return t && t.includes(' at step ') ? t : null; }}"
        first_step = _step_of(page.wait_for_function(shown_step, timeout=WAIT_MS).json_value())
        # its figures grow while it trains: no reload, no click
        page.wait_for_function(f"() => ({LOSS_POINTS_JS})() > {first_points}", timeout=WAIT_MS)
        page.wait_for_function(f"() => {{ const t = ({SUBHEADER_JS})(); return t && t.includes(' at step ') && +t.split(' at step ')[1].replace(/,/g, '') > {first_step}; }}",
                               timeout=WAIT_MS)  # fmt: skip
        assert app.exceptions() == []
        # the step slider: to the first recorded step
        # (a key press that lands while the view's fragment redraws the slider is lost: press again until taken)
        def moved() -> bool:
            thumb = page.locator(".st-key-runs-w-step").get_by_role("slider")
            thumb.focus()
            thumb.press("Home")
            try:
                page.wait_for_function("() => new URLSearchParams(window.location.search).has('step')", timeout=10_000)
            except Exception:  # noqa: BLE001 - playwright's TimeoutError: not taken yet
                return False
            return True

        _wait_until(moved, "the step slider's move in the URL")
        app.settle()
        chosen = app.query()["step"][0]
        page.wait_for_function(f"() => ({SUBHEADER_JS})().endsWith(' at step {int(chosen):,}')", timeout=WAIT_MS)
        shown = page.evaluate(SUBHEADER_JS)
        # Explore from the layer: the link carries op, parameters and the inputs' range
        href = page.get_by_test_id("stLinkButton").locator("a").first.get_attribute("href")  # (a redraw may show two)
        link_query = {k: v[-1] for k, v in parse_qs(urlsplit(href).query).items()}
        assert link_query["op"] in ("fast_sigmoid", "ste_sign") and float(link_query["lo"]) < float(link_query["hi"])
        explore = App(context.new_page(), server.url)
        explore.page.goto(href)
        explore.settle()
        explore.wait_figure()
        assert explore.exceptions() == [] and explore.warnings() == []
        explore_query = {k: v[-1] for k, v in explore.query().items()}
        assert {k: explore_query.get(k) for k in ("op", "lo", "hi")} == {k: link_query[k] for k in ("op", "lo", "hi")}
        # a copied link, in another browser: the same run, layer and step
        copied = page.url
        other_context = browser.new_context(viewport=harness.VIEWPORT)
        other = App(other_context.new_page(), server.url)
        other.page.goto(copied)
        other.settle()
        other.page.wait_for_function(f"() => ({SUBHEADER_JS})() === {shown!r}", timeout=WAIT_MS)
        assert other.exceptions() == [] and {k: v[-1] for k, v in other.query().items()} == {
            k: v[-1] for k, v in app.query().items()}  # fmt: skip
        other_context.close()
        # the end of the run shows as such
        stop_file.touch()
        process.wait(timeout=120)
        page.wait_for_function("() => document.body.innerText.includes('finished')", timeout=WAIT_MS)
        assert app.exceptions() == []
    except Exception:
        app.screenshot("FAILED_runs_browser")
        raise
    finally:
        context.close()
