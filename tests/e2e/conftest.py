"""Real-browser fixtures: one ``streamlit run app.py`` and one headless Debian Chromium per session.

Without Chromium (or Playwright) these tests skip with a message naming what is missing; with
``CI=true`` they fail instead, so CI cannot pass by skipping them. The app is "settled" when its
script run is over (see :data:`explorer.harness.SETTLED_JS`), never after a fixed sleep.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from urllib.parse import urlencode

import pytest

from explorer.bench import harness

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "e2e"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Each tick of the shared server's Train page trains at most this many epochs, so a training's live window
# (ticks of >= 1 s each) is set by the epochs a test asks for, not by the machine's speed.
EPOCHS_PER_TICK = 20
SETTLE_SECONDS = 90  # the first page load imports TensorFlow; later runs take well under a second

# x and y of every drawn trace named ``name`` in a chart (by Streamlit key), concatenated.
TRACE_JS = """([key, name]) => {
  const plot = document.querySelector('.st-key-' + key.replace(/[^a-zA-Z0-9_-]/g, '-') + ' .js-plotly-plot');
  const traces = plot._fullData.filter((t) => t.name === name);
  return {x: traces.flatMap((t) => Array.from(t.x)), y: traces.flatMap((t) => Array.from(t.y))};
}"""


def _missing_browser_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package 'playwright' is not installed (pip install -r requirements-dev.txt)"
    if not harness.chromium_available():
        return f"Chromium is missing: no executable at {harness.CHROMIUM} (apt-get install -y chromium, or set E2E_CHROMIUM)"
    return None


BROWSER_SKIP = "no real browser: "  # starts the reason of every skip for a missing browser


def pytest_configure(config):
    """`make test` runs the browser tests in the background, next to the unit tests, where the shell starts them
    with SIGINT ignored (how this run knows it is that one) and stops them with SIGTERM: both raise
    KeyboardInterrupt here, so a stopped run still ends its servers and Chromium (the fixtures' exits) instead of
    leaving them listening."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN and not hasattr(config, "workerinput"):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    reason = _missing_browser_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(BROWSER_SKIP + reason)
    return harness.CHROMIUM


def pytest_unconfigure(config):
    """A run that skipped the browser tests says so in red as its very last lines, below the final
    count, not only in the short summary (-ra) above it: a clone without Chromium must not take
    the skip for a pass."""
    terminalreporter = config.pluginmanager.get_plugin("terminalreporter")
    if terminalreporter is None:
        return
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if BROWSER_SKIP in str(report.longrepr)]
    if not skipped:
        return
    reason = str(skipped[0].longrepr[-1] if isinstance(skipped[0].longrepr, tuple) else skipped[0].longrepr)
    terminalreporter.write_sep("!", f"{len(skipped)} BROWSER TESTS DID NOT RUN", red=True, bold=True)
    terminalreporter.write_line(reason.removeprefix("Skipped: ").removeprefix(BROWSER_SKIP), red=True)
    terminalreporter.write_line("This run passed without them. With CI=true a missing browser fails the run instead.", red=True)


@pytest.fixture(scope="session")
def app_server():
    """``streamlit run app.py`` on a free port of 127.0.0.1; terminated (then killed) at the end."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    from explorer.ui.train import EPOCHS_PER_TICK_ENV

    env = {EPOCHS_PER_TICK_ENV: str(EPOCHS_PER_TICK)}
    with harness.serve_app(log_path=ARTIFACTS / "streamlit.log", env=env) as server:
        yield server


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=list(harness.CHROMIUM_ARGS))
        yield browser
        browser.close()


class App:
    """One browser tab on the app, with the waits and reads the scenarios share."""

    def __init__(self, page, url: str):
        self.page, self.url = page, url

    def open(self, path: str = "", query: dict | None = None) -> App:
        """Load ``/<path>?<query>`` (lists in ``query`` repeat a key) and wait until it is settled."""
        suffix = f"?{urlencode(query, doseq=True)}" if query else ""
        self.page.goto(f"{self.url}/{path}{suffix}")
        self.settle()
        return self

    def settle(self, timeout: float = SETTLE_SECONDS) -> None:
        self.page.wait_for_function(harness.SETTLED_JS, timeout=timeout * 1000)

    def figure(self, key: str = "main_figure") -> dict | None:
        return self.page.evaluate(harness.FIGURE_JS, key)

    def wait_figure(self, key: str = "main_figure") -> dict:
        self.page.wait_for_function(harness.FIGURE_JS, arg=key, timeout=SETTLE_SECONDS * 1000)
        return self.figure(key)

    def wait_figure_change(self, before: dict | None, key: str = "main_figure") -> dict:
        """Wait until the drawn data of chart ``key`` differs from ``before`` and the run is over."""
        self.page.wait_for_function(
            f"([before, key]) => ({harness.SETTLED_JS})() && "
            f"JSON.stringify(({harness.FIGURE_JS})(key)) !== JSON.stringify(before)",
            arg=[before, key],
            timeout=SETTLE_SECONDS * 1000,
        )
        return self.figure(key)

    def wait_query_value(self, name: str, value: str) -> None:
        """Wait until the URL's ``name`` is ``value`` and the run is over: the server has taken the value.

        Key presses on a slider are sent debounced, so a run for an earlier value can end (figure changed,
        page settled) before the last value reaches the server; this waits for the last one."""
        self.page.wait_for_function(
            f"([name, value]) => ({harness.SETTLED_JS})() && "
            "new URLSearchParams(window.location.search).get(name) === value",
            arg=[name, value],
            timeout=SETTLE_SECONDS * 1000,
        )

    def trace(self, name: str, key: str = "main_figure") -> tuple[list, list]:
        data = self.page.evaluate(TRACE_JS, [key, name])
        return data["x"], data["y"]

    def query(self) -> dict[str, list[str]]:
        from urllib.parse import parse_qs, urlsplit

        return parse_qs(urlsplit(self.page.url).query, keep_blank_values=True)

    def exceptions(self) -> list[str]:
        return self.page.get_by_test_id("stException").all_inner_texts()

    def alerts(self) -> list[str]:
        return self.page.get_by_test_id("stAlert").all_inner_texts()

    def warnings(self) -> list[str]:
        return self.page.get_by_test_id("stAlertContentWarning").all_inner_texts()

    def errors(self) -> list[str]:
        return self.page.get_by_test_id("stAlertContentError").all_inner_texts()

    def title(self) -> str:
        return self.page.locator("h1").first.inner_text().strip()

    def grid_rows(self, index: int = -1) -> list[list[str]]:
        grid = self.page.get_by_test_id("stDataFrame").nth(index)
        grid.scroll_into_view_if_needed()
        grid.locator('[role="gridcell"]').first.wait_for(state="attached", timeout=10_000)
        return grid.evaluate(harness.GRID_ROWS_JS)

    def sidebar_slider(self, label: str):
        return self.page.get_by_test_id("stSidebar").get_by_test_id("stSlider").filter(has_text=label)

    def nudge_slider(self, label: str, key: str = "ArrowRight", times: int = 1) -> None:
        thumb = self.sidebar_slider(label).get_by_role("slider")
        thumb.focus()
        for _ in range(times):
            thumb.press(key)

    def pick_op(self, op: str) -> None:
        box = self.page.get_by_test_id("stSelectbox").filter(has_text="Surrogate op").locator("input")
        box.click()
        box.fill(op)
        self.page.get_by_role("option", name=f"({op})").first.click()

    def screenshot(self, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def dump(self, name: str) -> None:
        """Save what a failing scenario saw: screenshot, URL, alerts and exceptions."""
        self.screenshot(f"FAILED_{name}")
        info = {"url": self.page.url, "alerts": self.alerts(), "exceptions": self.exceptions()}
        (ARTIFACTS / f"FAILED_{name}.json").write_text(json.dumps(info, indent=2))


@pytest.fixture
def app(browser, app_server, request):
    """A fresh browser context (so a fresh Streamlit session) per test."""
    context = browser.new_context(viewport=harness.VIEWPORT, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    application = App(page, app_server.url)
    yield application
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        try:
            application.dump(request.node.name)
        except Exception:  # noqa: BLE001 - a failing dump must not hide the test's own failure
            pass
    context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report
