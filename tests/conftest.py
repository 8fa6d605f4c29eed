"""Shared test settings: quiet TensorFlow, CPU only."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _record_running_children():
    """Each test's child processes are counted from what ran when it began (tests/processes.py)."""
    from tests.processes import record_running_children

    record_running_children()
    yield


def pytest_collection_modifyitems(config, items):
    """Modules whose every test is ``slow`` run first, each still whole and in its own order; the rest follow
    as collected. Under ``--dist worksteal`` the long modules (worker processes, subprocesses: minutes) then start
    at once on the first worker while the other takes the quick ones, and a worker that runs dry steals from the
    end of the other's queue, where the quick tests are: no long test starts near the end with a core idle."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(str(item.path), []).append(item)
    all_slow = [tests for tests in modules.values() if all(item.get_closest_marker("slow") for item in tests)]
    if not all_slow or len(all_slow) == len(modules):
        return
    rest = [tests for tests in modules.values() if not all(item.get_closest_marker("slow") for item in tests)]
    items[:] = [item for tests in all_slow + rest for item in tests]
