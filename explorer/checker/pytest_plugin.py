"""``pytest --update-snapshots``: re-record the snapshots of ``assert_custom_gradient(fn, snapshot=...)``.

Registered as a pytest plugin (entry point ``pytest11``) by ``pip install gradient-explorer``; the option
sets ``GRADIENT_EXPLORER_UPDATE_SNAPSHOTS=1`` for the run (xdist workers get the option too). Imported by
every pytest run where the package is installed, so it imports nothing heavy.
"""

from __future__ import annotations

import os

UPDATE_VARIABLE = "GRADIENT_EXPLORER_UPDATE_SNAPSHOTS"


def pytest_addoption(parser) -> None:
    parser.getgroup("gradient-explorer").addoption(
        "--update-snapshots",
        action="store_true",
        default=False,
        help=f"re-record the gradient snapshots of assert_custom_gradient(fn, snapshot=...) (as {UPDATE_VARIABLE}=1)",
    )


def pytest_configure(config) -> None:
    if config.getoption("update_snapshots", default=False):
        os.environ[UPDATE_VARIABLE] = "1"
