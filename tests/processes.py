"""Child processes of the test process that the running test started (the worker tests count them)."""

from __future__ import annotations

from multiprocessing import resource_tracker

import psutil

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
