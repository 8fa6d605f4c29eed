"""The browser harness shared by the browser benchmark and ``tests/e2e``: a served app, Chromium's
launch flags, the JavaScript probes that tell when a page is settled and what a chart drew, and the
page actions of one user (explore an op, train it, wait for the results).

Tooling, not product: Playwright is a development dependency (requirements-dev.txt), and nothing the
app imports imports this package.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

try:  # a development dependency (requirements-dev.txt); the module still imports without it
    from playwright.async_api import TimeoutError as PlaywrightTimeoutError
    from playwright.async_api import async_playwright
except ImportError:  # pragma: no cover
    PlaywrightTimeoutError, async_playwright = TimeoutError, None

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("E2E_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)
VIEWPORT = {"width": 1400, "height": 1000}
RESULTS_TIMEOUT_SECONDS = 180.0  # a user still without results this long after Start (+ stop_after) is a failure

# The app has finished its script run and drawn everything: Streamlit 1.67 sets stApp's
# data-test-script-state to "initial", "running", "rerunRequested" or "notRunning"; the status
# widget ("Running...") and skeletons (elements still loading) are gone.
SETTLED_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.getAttribute('data-test-script-state') === 'notRunning'
    && !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-testid="stSkeleton"]');
}"""

# A fingerprint of a plotly chart (by Streamlit key, "" = the first chart) built from the data
# plotly.js actually drew: the trace names and, per trace, the number of points and the sums of
# the finite x and y values. Null while the chart is not drawn yet.
FIGURE_JS = """(key) => {
  const root = key ? document.querySelector('.st-key-' + key.replace(/[^a-zA-Z0-9_-]/g, '-')) : document;
  const plot = root && root.querySelector('.js-plotly-plot');
  if (!plot || !plot._fullData) return null;
  const sum = (values) => Array.from(values || []).reduce((a, v) => (Number.isFinite(v) ? a + v : a), 0);
  return {
    titles: (plot.layout.annotations || []).map((a) => a.text),
    traces: plot._fullData.map((t) => ({name: t.name, n: (t.y || []).length, xsum: sum(t.x), ysum: sum(t.y)})),
  };
}"""


# Rows of the glide-data-grid behind st.dataframe / st.data_editor, from its accessibility DOM
# (role=row / role=gridcell); the header row has no gridcells and is dropped.
GRID_ROWS_JS = """(grid) => Array.from(grid.querySelectorAll('[role="row"]'))
  .map((row) => Array.from(row.querySelectorAll('[role="gridcell"]')).map((cell) => cell.textContent))
  .filter((cells) => cells.length > 0)"""


def chromium_available() -> bool:
    return os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """A running ``streamlit run app.py``; ``url`` has no trailing slash."""

    url: str
    process: subprocess.Popen
    log_path: Path


@contextmanager
def serve_app(
    port: int | None = None,
    log_path: Path | None = None,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    script: str | Path = "app.py",
) -> Iterator[Server]:
    """Run the app (or another Streamlit ``script``) headless on 127.0.0.1 until the block ends
    (terminate, then kill).

    Ready means ``/_stcore/health`` answers "ok"; the first page load still imports TensorFlow.
    ``env``: extra environment variables for the server (e.g. ``GRADIENT_EXPLORER_OPS``).
    """
    port = port or free_port()
    log_path = log_path or ROOT / "test-artifacts" / "e2e" / "streamlit.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "streamlit", "run", str(script),
        "--server.headless", "true",
        "--server.port", str(port),
        "--server.address", "127.0.0.1",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    with serve_command(command, port, log_path, timeout, env) as server:
        yield server


@contextmanager
def serve_command(
    command: list[str], port: int, log_path: Path, timeout: float = 120.0, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """Run a server ``command`` that listens on 127.0.0.1:``port`` until the block ends (terminate, then kill);
    ready when ``/_stcore/health`` answers "ok". ``env``: added to this process's environment."""
    server_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=server_env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, log_path, timeout)
        yield Server(url, process, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_healthy(url: str, process: subprocess.Popen, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"streamlit exited with code {process.returncode}; log: {log_path}\n{log_path.read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().decode().strip() == "ok":
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url}/_stcore/health did not answer 'ok' within {timeout:g} s; log: {log_path}")


MEMORY_SAMPLE_SECONDS = 0.2


# -- memory from /proc -------------------------------------------------------------------------------
def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc/<pid>/task/<tid>/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(child) for child in (task / "children").read_text().split())
            except OSError:
                continue
    return found


def _status_kib(pid: int, field_name: str) -> int:
    """A ``kB`` field of /proc/<pid>/status (VmRSS, VmHWM), 0 if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_memory(pid: int) -> tuple[int, int]:
    """(sum of VmRSS, sum of VmHWM) in bytes over ``pid`` and its descendants."""
    pids = process_tree(pid)
    return (
        sum(_status_kib(p, "VmRSS") for p in pids) * 1024,
        sum(_status_kib(p, "VmHWM") for p in pids) * 1024,
    )


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds so far of ``pid`` and its live descendants (/proc/<pid>/stat)."""
    ticks = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


class MemorySampler:
    """Samples :func:`tree_memory` in a thread; ``peak_rss`` is the largest sampled sum."""

    def __init__(self, pid: int, interval: float = MEMORY_SAMPLE_SECONDS):
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_hwm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, hwm = tree_memory(self.pid)
            self.peak_rss, self.peak_hwm = max(self.peak_rss, rss), max(self.peak_hwm, hwm)
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def slider_ops() -> list[str]:
    """Ops whose first parameter is a float slider on the Explore page (the latency probes move it)."""
    import ops

    return [
        spec.key
        for spec in map(ops.get, ops.names())
        if spec.params
        and not spec.params[0].integer
        and not (spec.params[0].low > 0 and spec.params[0].high / spec.params[0].low > 1e4)  # a number input
    ]



# -- async page actions (the e2e tests have sync twins in tests/e2e/conftest.py) ---------------------------
async def settle(page, timeout: float = 90.0) -> None:
    await page.wait_for_function(SETTLED_JS, timeout=timeout * 1000)


async def figure(page, key: str = "") -> dict | None:
    return await page.evaluate(FIGURE_JS, key)


async def open_explore(page, url: str, op: str, params: dict[str, float] | None = None) -> None:
    """Load the Explore page (the default page, so at ``/``) with ``op`` and its parameters from the URL."""
    query = urlencode({"op": op, **{f"p.{name}": value for name, value in (params or {}).items()}})
    await page.goto(f"{url}/?{query}")
    await settle(page)
    await page.wait_for_function(FIGURE_JS, arg="main_figure", timeout=60_000)


async def nudge_first_slider(page, key: str = "ArrowRight") -> float:
    """Press ``key`` on the first sidebar slider; seconds until the main figure has changed and settled."""
    before = await figure(page, "main_figure")
    thumb = page.get_by_test_id("stSidebar").get_by_role("slider").first
    await thumb.focus()
    start = time.perf_counter()
    await thumb.press(key)
    await page.wait_for_function(
        f"(before) => ({SETTLED_JS})() && JSON.stringify(({FIGURE_JS})('main_figure')) !== JSON.stringify(before)",
        arg=before,
        timeout=60_000,
    )
    return time.perf_counter() - start


async def start_training(page, epochs: int, full_batch: bool = True, points: int | None = None) -> list[list[str]]:
    """From the Explore page of op X, go to Train (whose default runs are X custom and X true), Start.
    ``full_batch=False`` switches "Full batch" off first (mini-batches of the default size); ``points``
    sets the data set's size.

    Returns the runs table as it was when Start was pressed."""
    await page.get_by_test_id("stSidebarNav").get_by_role("link", name="Train").click()
    await page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).wait_for(timeout=60_000)
    await settle(page)
    if not full_batch:
        switch = page.get_by_test_id("stSidebar").get_by_test_id("stCheckbox").filter(has_text="Full batch")
        if await switch.locator("input").is_checked():
            await switch.locator("label").click()
            await settle(page)
    if points is not None:
        points_input = page.get_by_test_id("stSidebar").get_by_role("spinbutton", name="Points", exact=True)
        await points_input.fill(str(points))
        await points_input.press("Enter")
        await settle(page)
    epochs_input = page.get_by_test_id("stSidebar").get_by_role("spinbutton", name="Epochs", exact=True)
    await epochs_input.fill(str(epochs))
    await epochs_input.press("Enter")
    await settle(page)
    runs_table = await grid_rows(page, 0)
    await page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).click()
    return runs_table


async def wait_results(page, timeout: float) -> None:
    await page.get_by_role("heading", name="Results").wait_for(timeout=timeout * 1000)
    await settle(page)


async def grid_rows(page, index: int = -1) -> list[list[str]]:
    """Cell texts of the ``index``-th st.dataframe / st.data_editor (a canvas grid: read its accessibility DOM)."""
    grid = page.get_by_test_id("stDataFrame").nth(index)
    await grid.scroll_into_view_if_needed()
    await grid.locator('[role="gridcell"]').first.wait_for(state="attached", timeout=10_000)
    return await grid.evaluate(GRID_ROWS_JS)


@dataclass
class UserRun:
    """What one browser context saw."""

    op: str
    params: dict[str, float] = field(default_factory=dict)
    explore_title: str = ""  # the Explore page's heading, and its URL's op and parameters
    explore_query: dict[str, list[str]] = field(default_factory=dict)
    url: str = ""
    title: str = ""
    runs_table: list[list[str]] = field(default_factory=list)  # the Train page's runs editor before Start
    runs: list[str] = field(default_factory=list)  # the "run" column of the results table
    loss_points: list[int] = field(default_factory=list)  # points in the loss chart, sampled while training
    final_loss_points: dict[str, int] = field(default_factory=dict)  # per run, once the results are shown
    exceptions: int = 0
    seconds: float = 0.0  # the whole visit: explore, go to Train, train, results
    start_to_results_s: float = 0.0  # from the Start click to the Results heading on screen
    training_from: float = 0.0  # time.perf_counter() when the loss chart first showed points
    training_until: float = 0.0  # time.perf_counter() at the Stop click, else when the Results heading was seen


async def train_as_user(
    browser,
    url: str,
    op: str,
    epochs: int,
    stop_after: float | None,
    screenshot: Path | None = None,
    params: dict[str, float] | None = None,
    training: asyncio.Event | None = None,
    full_batch: bool = True,
    stop: asyncio.Event | None = None,
    points: int | None = None,
) -> UserRun:
    """One user: explore ``op`` with ``params``, then train it; stop after ``stop_after`` s (None:
    until the target epoch) or once ``stop`` is set, whichever is first; wait for the results table.
    ``training`` is set once the loss chart shows points (the models are built and traced: the user
    is training)."""
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    result = UserRun(op, dict(params or {}))
    start = time.perf_counter()
    try:
        await open_explore(page, url, op, params)
        result.explore_title = await page.locator("h1").first.inner_text()
        result.explore_query = parse_qs(urlsplit(page.url).query)
        result.exceptions += await page.get_by_test_id("stException").count()
        result.runs_table = await start_training(page, epochs, full_batch, points)
        started = time.perf_counter()
        deadline = start + stop_after if stop_after else None
        stopped = False
        give_up = started + (stop_after or 0.0) + RESULTS_TIMEOUT_SECONDS
        while not await page.get_by_role("heading", name="Results").count():
            if time.perf_counter() > give_up:
                progress = await page.get_by_test_id("stProgress").all_inner_texts()
                if screenshot:
                    await page.screenshot(path=str(screenshot.with_name(f"NO_RESULTS_{screenshot.name}")), full_page=True)
                raise TimeoutError(f"{op}: no results {RESULTS_TIMEOUT_SECONDS:g} s after training should end; progress {progress}")
            data = await figure(page, "train.loss_chart")
            if data:
                result.loss_points.append(sum(t["n"] for t in data["traces"]))
                if result.loss_points[-1] and not result.training_from:
                    result.training_from = time.perf_counter()
                    if training is not None:
                        training.set()
            if (deadline and time.perf_counter() > deadline) or (stop is not None and stop.is_set() and not stopped):
                deadline, stopped = None, True
                result.training_until = time.perf_counter()  # training ends with this click, not with the results
                try:
                    await (
                        page.get_by_test_id("stMain")
                        .get_by_role("button", name="Stop", exact=True)
                        .click(timeout=5_000)
                    )
                except PlaywrightTimeoutError:  # it finished first: Stop is disabled
                    pass
            await asyncio.sleep(0.5)
        result.training_until = result.training_until or time.perf_counter()
        await wait_results(page, timeout=120)
        result.start_to_results_s = time.perf_counter() - started
        result.url = page.url
        result.title = await page.locator("h1").first.inner_text()
        result.runs = [row[0] for row in await grid_rows(page, -1)]
        final = await figure(page, "train.loss_chart")
        result.final_loss_points = {trace["name"]: trace["n"] for trace in (final or {}).get("traces", [])}
        result.exceptions += await page.get_by_test_id("stException").count()
        if screenshot:
            await page.screenshot(path=str(screenshot), full_page=True)
    finally:
        result.seconds = time.perf_counter() - start
        await context.close()
    return result


async def many_users(
    url: str,
    op_keys: Sequence[str],
    epochs: int,
    stop_after: float | None = None,
    screenshot_dir: Path | None = None,
    params: Sequence[dict[str, float] | None] | None = None,
) -> list[UserRun]:
    """``len(op_keys)`` browser contexts in one Chromium, each training its own op at the same time."""
    params = list(params or [None] * len(op_keys))
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            return await asyncio.gather(*(
                train_as_user(browser, url, op, epochs, stop_after,
                              screenshot_dir / f"user_{i}_{op}.png" if screenshot_dir else None, params[i])
                for i, op in enumerate(op_keys)
            ))  # fmt: skip
        finally:
            await browser.close()


