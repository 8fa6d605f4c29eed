"""Private by default, for every way of starting the app (issue 45): ``gradient-explorer run`` as one server and
as ``--replicas`` behind HAProxy (and ``--auth``, which implies one replica), each with and without ``--share``,
judged by the TCP sockets its processes actually listen on (psutil reads them from /proc), never by its
configuration. Without ``--share`` every listening socket is on 127.0.0.1; with it only the public one (the server's,
or the proxy's) is on 0.0.0.0 and the replicas stay on loopback. Loopback traffic only; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from explorer.bench import harness
from tests.conftest import require_tool
from tests.processes import start_explorer_run

pytestmark = pytest.mark.slow

START_SECONDS = 240  # servers importing TensorFlow on a busy 2-core machine; a hang only (health is polled)
# "secret", hashed with SHA-512 crypt (openssl passwd -6 -salt abcdefgh secret)
ALICE = "alice:$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."


def _listening(pids: set[int]) -> set[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket (IPv4 and IPv6) any of ``pids`` listens on."""
    found = set()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                found.add((pid, conn.laddr.ip, conn.laddr.port))
    return found


def _tree(pid: int) -> set[int]:
    process = psutil.Process(pid)
    return {pid, *(child.pid for child in process.children(recursive=True))}


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
            return response.status in (200, 401)
    except urllib.error.HTTPError as error:
        return error.code == 401  # basic auth at the proxy: it answers, and asks for a password
    except OSError:
        return False


class Launched:
    """``python -m explorer run FLAGS --server.port PORT`` in its own session, its operator folder in ``tmp``."""

    def __init__(self, tmp: Path, *flags: str):
        self.port = harness.free_port()
        self.log_path = tmp / "run.log"
        self.process = start_explorer_run(tmp, flags, self.port, self.log_path)
        self.status_path = tmp / "config" / "gradient-explorer" / f"run-{self.port}.json"
        self.replicated = any(flag in flags for flag in ("--replicas", "--auth"))

    def wait(self) -> dict | None:
        """Until the public port answers (and, with replicas, the status file is written): the status, if any."""
        deadline = time.monotonic() + START_SECONDS
        while not (_answers(self.port) and (not self.replicated or self.status_path.exists())):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"did not start (exit {self.process.poll()}); log:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        return json.loads(self.status_path.read_text()) if self.replicated else None

    def stop(self) -> int:
        """SIGTERM (the single server is Streamlit itself; the replica command stops its children), then its exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its own session: only what this test started
                self.process.wait(timeout=10)
                raise
        return self.process.returncode


@pytest.mark.parametrize(("share", "public"), [(False, "127.0.0.1"), (True, "0.0.0.0")], ids=["default", "share"])
def test_one_server_listens_on_loopback_unless_shared(tmp_path, share, public):
    run = Launched(tmp_path, *(["--share"] if share else []))
    try:
        run.wait()
        # the launcher exec'd Streamlit: its pid is the server's; no child listens on anything
        assert _listening(_tree(run.process.pid)) == {(run.process.pid, public, run.port)}
        first_line = run.log_path.read_text().splitlines()[0]
        assert ("reachable from this machine only" in first_line) == (not share), first_line
    finally:
        code = run.stop()
    assert code == 0, run.log_path.read_text()[-2000:]  # Streamlit stops cleanly on SIGTERM


@pytest.mark.parametrize(
    ("flags", "public"),
    [
        (("--replicas", "2"), "127.0.0.1"),
        (("--replicas", "2", "--share"), "0.0.0.0"),
        (("--auth", "users.htpasswd"), "127.0.0.1"),  # --auth implies one replica; a password opens nothing
    ],
    ids=["replicas", "replicas-share", "auth"],
)
def test_replicas_listen_on_loopback_and_the_proxy_on_loopback_unless_shared(tmp_path, flags, public):
    require_tool("haproxy", "gradient-explorer run --replicas needs HAProxy: apt-get install -y haproxy")
    (tmp_path / "users.htpasswd").write_text(ALICE + "\n")
    run = Launched(tmp_path, *flags)
    try:
        status = run.wait()
        proxy, replicas = status["proxy_pid"], status["replicas"]
        assert len(replicas) == (2 if "--replicas" in flags else 1)
        expected = {(proxy, public, run.port)} | {(r["pid"], "127.0.0.1", r["port"]) for r in replicas}
        assert _listening(_tree(run.process.pid)) == expected  # nothing else listens, the command itself included
        assert status["address"] == public
    finally:
        code = run.stop()
    assert code == 0, run.log_path.read_text()[-2000:]  # SIGTERM: the command stops its replicas and the proxy
    assert not psutil.pid_exists(proxy) or psutil.Process(proxy).status() == psutil.STATUS_ZOMBIE
