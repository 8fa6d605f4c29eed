"""The process tests' shared pieces: the child processes the running test started (they count them), ``loaded``
serving a fixture module of crashing ops, and ``gradient-explorer run`` started as an operator starts it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

# Workers that earlier tests of this process started and keep warm (the guardrail's, verify's) are not the
# running test's: tests/conftest.py records what ran when each test began.
BEFORE_THE_TEST: set[int] = set()


def record_running_children() -> None:
    BEFORE_THE_TEST.clear()
    BEFORE_THE_TEST.update(child.pid for child in psutil.Process().children(recursive=True))


def started_children() -> set[int]:
    """This process's children and grandchildren started since the test began, less multiprocessing's resource
    tracker and the fork server the workers are forked from (it serves the whole session)."""
    from explorer.worker import forking

    left_out = {getattr(resource_tracker._resource_tracker, "_pid", None), forking.running_pid()}
    running = {child.pid for child in psutil.Process().children(recursive=True) if child.pid not in left_out}
    return running - BEFORE_THE_TEST


@contextlib.contextmanager
def serving(fixture: str, call_seconds: float, check_seconds: float | None = None) -> Iterator:
    """``loaded`` serving ``fixture`` (a path from the repository's root, the working directory meanwhile) with
    the workers' time limits set; yields ``loaded.current()``, and ``loaded`` is reset before and after."""
    from explorer import loaded, worker

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(loaded.OPS_ENV, fixture)
        patch.setenv(worker.process.CALL_SECONDS_ENV, str(call_seconds))
        if check_seconds is not None:
            patch.setenv(worker.process.CHECK_SECONDS_ENV, str(check_seconds))
        patch.chdir(ROOT)
        loaded.reset()
        try:
            yield loaded.current()
        finally:
            loaded.reset()


def start_explorer_run(tmp: Path, flags: tuple[str, ...], port: int, log_path: Path, env: dict | None = None):
    """``python -m explorer run FLAGS --server.port PORT`` in a session of its own (so a test can signal its whole
    tree), run from ``tmp`` with its operator folder (``XDG_CONFIG_HOME``) in ``tmp/config``; output to ``log_path``."""
    environment = {
        **os.environ, "XDG_CONFIG_HOME": str(tmp / "config"), "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
        "CUDA_VISIBLE_DEVICES": "", **(env or {}),
    }  # fmt: skip
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "explorer", "run", *flags, "--server.port", str(port)],
            cwd=tmp, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True,
        )  # fmt: skip
