"""Two replicas behind the real HAProxy (``gradient-explorer run --replicas 2``), driven by real browsers.

Six browser contexts spread over both replicas (the proxy's response header and the page's sidebar say which);
each one's CSV download and a WebSocket reconnect forced at the proxy stay on its replica; killing one replica
(SIGKILL), its contexts come back on the other with the same view from the URL, a training run there is named as
lost, and the other contexts never notice; the command restarts it and HAProxy takes it back. With basic auth, a request without credentials gets 401, the WebSocket
upgrade included. Loopback only; every wait is bounded and waits for an event, not for a clock.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from explorer.bench import harness
from explorer.serve import replicas
from explorer.ui.train import EPOCHS_PER_TICK_ENV
from tests.e2e.conftest import ARTIFACTS, EPOCHS_PER_TICK, SETTLE_SECONDS, App
from tests.processes import start_explorer_run

pytestmark = pytest.mark.e2e

OPS = ("atan", "fast_sigmoid", "sigmoid", "triangle", "gaussian", "softsign")
HEADER = replicas.REPLICA_HEADER.lower()
START_SECONDS = 240  # two replicas and the proxy answering (a hang only: health is polled)
MOVE_SECONDS = 120  # a reconnect or a move to the other replica (a hang only: events are polled)
# "secret", hashed with SHA-512 crypt (openssl passwd -6 -salt abcdefgh secret)
ALICE = "alice:$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."


class ReplicaRun:
    """``python -m explorer run --replicas N`` in its own process group, with its operator folder in ``tmp``."""

    def __init__(self, tmp: Path, *flags: str):
        self.port = harness.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = ARTIFACTS / f"replicas_{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process = start_explorer_run(tmp, flags, self.port, self.log_path, {EPOCHS_PER_TICK_ENV: str(EPOCHS_PER_TICK)})
        self.status_path = tmp / "config" / "gradient-explorer" / f"run-{self.port}.json"
        deadline = time.monotonic() + START_SECONDS
        while not self.status_path.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the replica set did not start; log {self.log_path}:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        self.status = json.loads(self.status_path.read_text())

    def pid(self, name: str) -> int:
        """The replica's process id now (a restarted replica has a new one in the status file)."""
        status = json.loads(self.status_path.read_text())
        return next(r["pid"] for r in status["replicas"] if r["name"] == name)

    def proxy_state(self, name: str) -> str:
        """HAProxy's view of one replica: UP, DOWN, ... (``show stat``'s status column)."""
        header, *rows = self.proxy_command("show stat").strip().splitlines()
        columns = header.lstrip("# ").split(",")
        for row in rows:
            values = dict(zip(columns, row.split(","), strict=False))
            if values.get("pxname") == "replicas" and values.get("svname") == name:
                return values["status"]
        raise LookupError(f"HAProxy has no server {name!r} in its 'replicas' backend")

    def proxy_command(self, command: str) -> str:
        """One command to HAProxy's runtime API (the operator's socket)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(self.status["stats_socket"])
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # the command stops its replicas and the proxy
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its own group: only what this test started
                self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory, chromium_path):
    run = ReplicaRun(tmp_path_factory.mktemp("replicas"), "--replicas", "2")
    yield run
    run.stop()
    assert not run.status_path.exists()  # removed on a clean stop


class Visitor:
    """One browser context on the proxy: its page, the replica that served it, the WebSockets it opened."""

    def __init__(self, browser, url: str, op: str):
        self.context = browser.new_context(viewport=harness.VIEWPORT, accept_downloads=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.sockets: list[str] = []
        self.page.on("websocket", lambda ws: self.sockets.append(ws.url))
        self.app = App(self.page, url)
        self.op = op
        response = self.page.goto(f"{url}/?op={op}")
        self.replica = response.headers[HEADER]
        self.app.settle()
        self.app.wait_figure()

    def sidebar_replica(self) -> str:
        text = self.page.locator(".st-key-replica").inner_text(timeout=SETTLE_SECONDS * 1000)
        return re.fullmatch(r"Served by replica (\S+)", text.strip()).group(1)

    def wait_until(self, condition, what: str, seconds: float = MOVE_SECONDS) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.op}: {what} within {seconds:g} s")
            self.page.wait_for_timeout(200)  # lets Playwright deliver the page's events


@pytest.fixture(scope="module")
def visitors(two_replicas, browser):
    opened = [Visitor(browser, two_replicas.url, op) for op in OPS]
    yield opened
    for visitor in opened:
        visitor.context.close()


def test_six_contexts_spread_over_both_replicas_and_downloads_and_reconnects_stay_on_theirs(two_replicas, visitors):
    for visitor in visitors:  # the proxy's header for the page and the replica that runs its session agree
        assert visitor.sidebar_replica() == visitor.replica, visitor.op
    spread = collections.Counter(visitor.replica for visitor in visitors)
    assert set(spread) == {"r1", "r2"} and min(spread.values()) >= 2, spread

    for visitor in visitors[:2] + visitors[-1:]:  # a CSV lives in its replica's media store: it must come from there
        with visitor.page.expect_download(timeout=60_000) as info:
            visitor.page.get_by_role("button", name=re.compile(r"^Sweep as CSV")).click()
        download = info.value
        lines = Path(download.path()).read_text().splitlines()
        assert lines[0].split(",")[0] == "x" and len(lines) > 100, lines[:2]
        again = visitor.context.request.get(download.url)  # the context's cookies: its replica
        assert again.status == 200 and again.headers[HEADER] == visitor.replica
        other = "r2" if visitor.replica == "r1" else "r1"
        request = urllib.request.Request(download.url, headers={"Cookie": f"{replicas.AFFINITY_COOKIE}={other}"})
        with pytest.raises(urllib.error.HTTPError) as missing:  # the other replica never had this file
            urllib.request.urlopen(request, timeout=10)
        assert missing.value.code == 404

    # Cut every connection to r1 at the proxy: its pages reconnect, to r1 again; r2's pages keep their socket.
    before = {visitor.op: (len(visitor.sockets), visitor.app.figure()) for visitor in visitors}
    two_replicas.proxy_command("shutdown sessions server replicas/r1")
    for visitor in visitors:
        count, figure = before[visitor.op]
        if visitor.replica == "r1":
            visitor.wait_until(lambda v=visitor, c=count: len(v.sockets) > c, "no new WebSocket after the cut")
            visitor.app.settle()
            assert visitor.sidebar_replica() == "r1", visitor.op
            assert visitor.app.figure() == figure and not visitor.app.exceptions()
    for visitor in visitors:
        if visitor.replica == "r2":
            assert len(visitor.sockets) == before[visitor.op][0], visitor.op


def test_killing_a_replica_moves_its_contexts_to_the_other_with_the_same_view(two_replicas, visitors):
    doomed = visitors[0].replica
    survivor = "r2" if doomed == "r1" else "r1"
    trainer = visitors[0]  # this one trains when its replica dies: the page must say the run is lost
    trainer.page.goto(f"{two_replicas.url}/train?epochs=2000")
    trainer.app.settle()
    trainer.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).click()
    trainer.page.wait_for_function(
        "() => new URLSearchParams(window.location.search).get('run') !== null", timeout=SETTLE_SECONDS * 1000
    )
    run_id = trainer.app.query()["run"][0]
    trainer.page.get_by_test_id("stMain").get_by_role("button", name="Stop", exact=True).wait_for(timeout=60_000)
    views = {visitor.op: (visitor.page.url, visitor.app.figure(), len(visitor.sockets)) for visitor in visitors}

    doomed_pid, survivor_pid = two_replicas.pid(doomed), two_replicas.pid(survivor)
    os.kill(doomed_pid, signal.SIGKILL)

    for visitor in visitors:
        if visitor.replica != doomed:
            continue
        visitor.wait_until(lambda v=visitor: v.page.locator(".st-key-replica").count() and v.sidebar_replica() == survivor,
                           f"the page did not come back on {survivor}")  # fmt: skip
        visitor.app.settle()
        if visitor is trainer:
            visitor.page.get_by_text("is not on this server").wait_for(timeout=SETTLE_SECONDS * 1000)
            notice = " ".join(visitor.app.warnings())
            assert run_id in notice and "results are lost" in notice
            # the lost run's id leaves the URL (this session holds no run); every control stays
            visitor.page.wait_for_function("() => !new URLSearchParams(window.location.search).has('run')", timeout=30_000)
        assert visitor.page.url == re.sub(r"&run=[0-9a-f]+$", "", views[visitor.op][0]), visitor.op  # the same view
        assert not visitor.app.exceptions(), visitor.app.exceptions()
        if visitor is not trainer:
            assert visitor.app.wait_figure() == views[visitor.op][1], visitor.op  # the same figure, redrawn there
    for visitor in visitors:  # the other replica's users never noticed: same socket, same page, still answering
        if visitor.replica == doomed:
            continue
        assert len(visitor.sockets) == views[visitor.op][2] and visitor.sidebar_replica() == survivor
        before = visitor.app.figure()
        thumb = visitor.page.get_by_test_id("stSidebar").get_by_role("slider").first
        thumb.focus()
        thumb.press("ArrowRight")
        visitor.app.wait_figure_change(before)
        assert not visitor.app.exceptions()
    assert f"replica {doomed} ended" in two_replicas.log_path.read_text()  # the command says what happened
    # ... and restarts it on its port, a new process that HAProxy's health checks take back into the pool
    deadline = time.monotonic() + START_SECONDS
    while not (f"replica {doomed} restarted" in two_replicas.log_path.read_text() and two_replicas.proxy_state(doomed) == "UP"):
        assert time.monotonic() < deadline, f"{doomed} was not back {START_SECONDS} s after its death; log {two_replicas.log_path}"
        time.sleep(1)
    assert two_replicas.pid(doomed) != doomed_pid and two_replicas.pid(survivor) == survivor_pid  # only the dead one


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _websocket_upgrade_status(port: int, authorization: str | None) -> int:
    """The status line's code for a WebSocket upgrade of Streamlit's stream, sent through the proxy."""
    lines = [
        "GET /_stcore/stream HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket", "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13", f"Origin: http://127.0.0.1:{port}",
    ]  # fmt: skip
    if authorization:
        lines.append(f"Authorization: {authorization}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return int(sock.recv(4096).split(b"\r\n", 1)[0].split()[1])


def test_with_basic_auth_a_request_without_credentials_gets_401_the_websocket_included(tmp_path):
    htpasswd = tmp_path / "team.htpasswd"
    htpasswd.write_text(ALICE + "\n")
    run = ReplicaRun(tmp_path, "--replicas", "1", "--auth", str(htpasswd))
    try:
        good = "Basic " + base64.b64encode(b"alice:secret").decode()
        bad = "Basic " + base64.b64encode(b"alice:guess").decode()
        for path in ("/", "/_stcore/health", "/train"):
            assert _status(run.url + path) == 401, path
            assert _status(run.url + path, {"Authorization": bad}) == 401, path
            assert _status(run.url + path, {"Authorization": good}) == 200, path
        assert _websocket_upgrade_status(run.port, None) == 401
        assert _websocket_upgrade_status(run.port, bad) == 401
        assert _websocket_upgrade_status(run.port, good) == 101  # through to Streamlit, which accepts it
        assert "Basic auth at the proxy: 1 user(s)" in run.log_path.read_text()
    finally:
        run.stop()
