"""The worker tests' shared pieces: the child processes the running test started (they count them), and
``loaded`` serving a fixture module of crashing ops."""

from __future__ import annotations

import contextlib
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
    """This process's children started since the test began, less multiprocessing's resource tracker."""
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    running = {child.pid for child in psutil.Process().children(recursive=True) if child.pid != tracker}
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
