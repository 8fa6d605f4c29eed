"""The served app's hardening, observed over HTTP (no browser): what `.streamlit/config.toml` is for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _request(url: str, method: str = "GET", headers: dict | None = None, data: bytes | None = None):
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def test_another_origin_gets_no_cors_permission(app_server):
    status, headers = _request(f"{app_server.url}/_stcore/host-config", headers={"Origin": "https://evil.example"})
    assert status == 200
    assert "Access-Control-Allow-Origin" not in headers  # CORS protection on: the browser blocks the read


def test_a_write_without_the_xsrf_token_is_refused(app_server):
    status, _ = _request(f"{app_server.url}/_stcore/upload_file/some-session/some-file", method="PUT", data=b"x")
    assert status == 403


def test_streamlit_applies_the_project_settings():
    """What Streamlit itself reads from the project (a misspelt key or section would be ignored silently)."""
    code = (
        "import json; from streamlit import config;"
        "names = ['client.showErrorDetails', 'client.toolbarMode', 'browser.gatherUsageStats', 'server.headless',"
        " 'server.runOnSave', 'server.maxUploadSize', 'server.maxMessageSize', 'server.enableXsrfProtection',"
        " 'server.enableCORS', 'runner.magicEnabled', 'server.address', 'server.disconnectedSessionTTL'];"
        "print(json.dumps({n: config.get_option(n) for n in names}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    effective = json.loads(out.stdout.strip().splitlines()[-1])
    assert effective["client.showErrorDetails"] in ("none", False)  # viewers never see a traceback
    assert effective["browser.gatherUsageStats"] is False
    assert effective["server.enableXsrfProtection"] is True and effective["server.enableCORS"] is True
    assert effective["server.headless"] is True and effective["server.runOnSave"] is False
    assert effective["server.address"] == "127.0.0.1"  # private unless the operator opens it
    assert effective["server.disconnectedSessionTTL"] == 600  # a short disconnect keeps the session (docs/serving.md)
    assert 0 < effective["server.maxUploadSize"] <= 10 and 0 < effective["server.maxMessageSize"] <= 100


def test_the_launcher_serves_with_the_project_settings_from_any_folder(tmp_path):
    """``python -m explorer run`` where there is no ``.streamlit/`` (as after ``pip install``): same hardening."""
    from explorer.bench import harness

    port = harness.free_port()
    log_path = tmp_path / "launcher.log"
    command = [sys.executable, "-m", "explorer", "run", "--server.port", str(port), "--server.address", "127.0.0.1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        harness.wait_healthy(url, process, log_path, timeout=120)
        status, headers = _request(f"{url}/_stcore/host-config", headers={"Origin": "https://evil.example"})
        assert status == 200 and "Access-Control-Allow-Origin" not in headers
        assert _request(f"{url}/_stcore/upload_file/session/file", method="PUT", data=b"x")[0] == 403
    finally:
        process.terminate()  # the launcher exec'd Streamlit: this stops the server itself
        assert process.wait(timeout=20) == 0  # Streamlit stops cleanly on SIGTERM


# -- private by default: read from the server's own listening sockets, no traffic to any other address -----
def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on (psutil reads /proc/<pid>/net and fd)."""
    import psutil

    return {
        (conn.laddr.ip, conn.laddr.port)
        for conn in psutil.Process(pid).net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN
    }


def _launch(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    log_path = tmp_path / "launcher.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "explorer", "run", *args], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=env
        )
    return process, log_path


@pytest.mark.parametrize(
    ("flags", "address", "says"),
    [((), "127.0.0.1", "reachable from this machine only"), (("--share",), "0.0.0.0", "every network interface (0.0.0.0)")],
    ids=["default", "share"],
)
def test_the_launcher_listens_on_loopback_unless_shared(tmp_path, flags, address, says):
    """A fresh ``gradient-explorer run`` listens on 127.0.0.1 only; ``--share`` on every interface, and says so."""
    from explorer.bench import harness

    port = harness.free_port()
    process, log_path = _launch(tmp_path, "--server.port", str(port), *flags)
    try:
        harness.wait_healthy(f"http://127.0.0.1:{port}", process, log_path, timeout=120)  # loopback only
        assert _listening(process.pid) == {(address, port)}  # the launcher exec'd Streamlit: same pid
        first_line = log_path.read_text().splitlines()[0]
        assert says in first_line and str(port) in first_line
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0  # Streamlit stops cleanly on SIGTERM
