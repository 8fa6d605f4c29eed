"""Figures for a paper and a view for a teammate (issue 40, item 3): the notebook's ``plot(..., save=...)`` (writing
with kaleido in Chromium: tests/e2e/test_downloads_browser.py)."""

from __future__ import annotations

import sys

import pytest

import explorer


# -- the notebook's plot(..., save=...) without kaleido (writing with it: tests/e2e/test_downloads_browser.py) -----
def test_saving_without_kaleido_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "kaleido", None)  # import kaleido raises ImportError
    target = tmp_path / "atan.svg"
    with pytest.raises(ImportError, match=r"pip install 'gradient-explorer\[images\]'"):
        explorer.plot("atan", n=201, save=target)
    assert not target.exists()
    assert explorer.plot("atan", n=201).data  # without save= nothing is needed


def test_saving_to_an_unknown_format_names_the_allowed_ones(tmp_path):
    with pytest.raises(ValueError, match=r"allowed: \.svg, \.png, \.pdf"):
        explorer.plot("atan", n=201, save=tmp_path / "atan.jpg")
