"""A team's module whose backwards end or block their process, in a real server and browser: picking each
bad function in the Explore picker shows how it ended, the server process stays alive with no thread or
process of the bad call left, the good function still draws, and another user's page keeps answering."""

from __future__ import annotations

import re

import numpy as np
import psutil
import pytest

from explorer import worker
from explorer.bench import harness
from explorer.serve import OPS_ENV
from tests.e2e.conftest import ARTIFACTS, App
from tests.test_worker_ops import CAUSES, FIXTURE

pytestmark = pytest.mark.e2e

CALL_SECONDS = 10


@pytest.fixture(scope="module")
def crashing_server():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {OPS_ENV: FIXTURE, worker.process.CALL_SECONDS_ENV: str(CALL_SECONDS), worker.process.CHECK_SECONDS_ENV: "20"}
    with harness.serve_app(log_path=ARTIFACTS / "streamlit_worker.log", env=env) as server:
        yield server


def _tab(browser, url: str) -> tuple[App, object]:
    context = browser.new_context(viewport=harness.VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    return App(page, url), context


def _pick(app: App, key: str) -> None:
    box = app.page.get_by_test_id("stSelectbox").filter(has_text="Surrogate op").locator("input")
    box.click()
    box.fill(key)
    app.page.get_by_role("option", name=re.compile(re.escape(key))).first.click()
    app.page.wait_for_function(
        "(key) => new URLSearchParams(window.location.search).get('op') === key", arg=key, timeout=120_000
    )
    app.settle(timeout=120)


def _draws_identity(app: App) -> None:
    app.wait_figure()
    x, y = (np.asarray(values, dtype=float) for values in app.trace("custom gradient"))
    assert len(x) > 100
    np.testing.assert_array_equal(y, np.ones_like(x))


def _threads_and_children(process: psutil.Process) -> tuple[int, set[int]]:
    """The server's threads and its worker processes (its children and grandchildren but the fork server, the
    workers' parent, which lives as long as the server)."""
    fork_servers = {c.pid for c in process.children() if "explorer.worker.forkserver" in " ".join(c.cmdline())}
    return process.num_threads(), {child.pid for child in process.children(recursive=True)} - fork_servers


def test_picking_each_bad_function_shows_its_failure_and_the_server_goes_on(browser, crashing_server):
    server = psutil.Process(crashing_server.process.pid)
    app, context = _tab(browser, crashing_server.url)
    other, other_context = _tab(browser, crashing_server.url)
    try:
        app.open(query={"op": "good_identity"})
        _draws_identity(app)
        other.open(query={"op": "atan"})
        other.wait_figure()
        threads, children = _threads_and_children(server)
        assert len(children) == 2  # the interactive and the background worker
        for key, cause in CAUSES.items():
            _, before = _threads_and_children(server)
            _pick(app, key)
            errors = app.errors()
            assert any(cause.format(seconds=CALL_SECONDS) in text and key in text for text in errors), errors
            assert app.figure() is None and app.exceptions() == []
            assert server.is_running() and crashing_server.process.poll() is None
            _, after = _threads_and_children(server)
            gone = before - after  # the worker that ran the bad sweep was killed (and reaped), then replaced
            assert gone and not any(psutil.pid_exists(pid) for pid in gone) and len(after) == 2
            # another user's page answers: a reload of theirs draws the built-in op's figure
            other.open(query={"op": "atan", "alpha": "3"})
            other.wait_figure()
            assert other.exceptions() == []
            _pick(app, "good_identity")
            _draws_identity(app)
        app.screenshot("worker_good_after_bad")
        # nothing of the bad calls is left in the server: no thread was added for them (the checks'
        # executor thread, started at the first check, is the one allowed), two workers as before
        now_threads, now_children = _threads_and_children(server)
        assert now_threads <= threads + 1, (threads, now_threads)
        assert len(now_children) == 2
    finally:
        context.close()
        other_context.close()
