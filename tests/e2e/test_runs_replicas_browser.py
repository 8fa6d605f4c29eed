"""A run written while two browsers watch the Runs page, one on each replica of ``gradient-explorer run
--replicas 2 --runs DIR`` behind the real HAProxy: it shows up on both (issue 47). Loopback only; every wait is
bounded and waits for a state (the delay each browser saw is printed, not asserted: it depends on the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.bench import harness
from tests.e2e.conftest import ARTIFACTS, App
from tests.e2e.test_replicas_browser import HEADER, ReplicaRun

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUN = "on-both"
WAIT_SECONDS = 180.0  # a hang only: the waits poll for the run in each list
MAX_CONTEXTS = 10  # browser contexts opened to get one on each replica (the proxy balances new sessions)


def _listed(app: App) -> bool:
    try:
        return any(row and row[0] == RUN for row in app.grid_rows(0))
    except Exception:  # noqa: BLE001 - no list drawn yet (an empty folder shows a note): not listed
        return False


def test_a_run_written_while_two_replicas_watch_shows_on_both(tmp_path, chromium_path, browser):
    runs = tmp_path / "runs"
    runs.mkdir()
    replica_set = ReplicaRun(tmp_path, "--replicas", "2", "--runs", str(runs))
    contexts, watchers = [], {}
    writer, stop_file = None, tmp_path / "stop"
    try:
        for _ in range(MAX_CONTEXTS):
            context = browser.new_context(viewport=harness.VIEWPORT)
            contexts.append(context)
            page = context.new_page()
            page.set_default_timeout(30_000)
            response = page.goto(f"{replica_set.url}/runs")
            replica = response.headers[HEADER]
            if replica not in watchers:
                app = App(page, replica_set.url)
                app.settle()
                watchers[replica] = app
            if len(watchers) == 2:
                break
        assert set(watchers) == {"r1", "r2"}, f"{MAX_CONTEXTS} contexts all landed on {set(watchers)}"
        for app in watchers.values():
            assert not _listed(app) and app.exceptions() == []
        with open(ARTIFACTS / "runs_replicas_writer.log", "w") as log:
            writer = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "e2e" / "runs_writer.py"), "synthetic", str(runs), RUN, str(stop_file)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
        started = time.monotonic()
        seen: dict[str, float] = {}
        while len(seen) < 2:
            for name, app in watchers.items():
                if name not in seen and _listed(app):
                    seen[name] = time.monotonic() - started
            assert time.monotonic() - started < WAIT_SECONDS, f"after {WAIT_SECONDS:g} s the run is listed on {sorted(seen)} only"
            time.sleep(0.5)
        print(f"the run showed on r1 after {seen['r1']:.1f} s, on r2 after {seen['r2']:.1f} s (refresh every 2 s)")
        for app in watchers.values():
            assert app.exceptions() == []
    finally:
        stop_file.touch()
        if writer is not None:
            try:
                writer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                writer.kill()
                writer.wait(timeout=10)
        for context in contexts:
            context.close()
        replica_set.stop()
