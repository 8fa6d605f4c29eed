"""Hardening of .streamlit/config.toml for a shared demo (a plain test: no browser, no server)."""

import tomllib
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml"


@pytest.fixture(scope="module")
def config() -> dict:
    with CONFIG.open("rb") as handle:
        return tomllib.load(handle)


def test_xsrf_protection_on_and_cors_left_on(config):
    assert config["server"]["enableXsrfProtection"] is True
    assert config["server"].get("enableCORS", True) is True  # True is Streamlit's default


def test_viewers_never_see_tracebacks(config):
    assert config["client"]["showErrorDetails"] in ("none", False)


def test_upload_and_message_sizes_are_small(config):
    assert 0 < config["server"]["maxUploadSize"] <= 10  # MB; the app takes no uploads
    assert 0 < config["server"]["maxMessageSize"] <= 100  # MB; Streamlit's default is 200


def test_usage_statistics_off(config):
    assert config["browser"]["gatherUsageStats"] is False


def test_server_is_headless_and_does_not_rerun_on_file_changes(config):
    assert config["server"]["headless"] is True
    assert config["server"].get("runOnSave", False) is False
