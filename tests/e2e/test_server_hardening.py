"""The served app's hardening, observed over HTTP (no browser): what `.streamlit/config.toml` is for."""

from __future__ import annotations

import json
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
        " 'server.enableCORS', 'runner.magicEnabled'];"
        "print(json.dumps({n: config.get_option(n) for n in names}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    effective = json.loads(out.stdout.strip().splitlines()[-1])
    assert effective["client.showErrorDetails"] in ("none", False)  # viewers never see a traceback
    assert effective["browser.gatherUsageStats"] is False
    assert effective["server.enableXsrfProtection"] is True and effective["server.enableCORS"] is True
    assert effective["server.headless"] is True and effective["server.runOnSave"] is False
    assert 0 < effective["server.maxUploadSize"] <= 10 and 0 < effective["server.maxMessageSize"] <= 100
