"""Shared test settings: quiet TensorFlow, CPU only; and the one way a test asks for an optional dependency.

An optional backend (JAX, torch) or tool (HAProxy, chrt) that is missing skips the tests that need it locally,
with the reason and how to install it in pytest's summary; with ``CI=true`` it fails them instead, naming what is
missing, so CI cannot pass by skipping (as the browser tests do, tests/e2e/conftest.py). Ask with
:func:`require` / :func:`require_tool` inside a test or fixture, or mark a test ``@pytest.mark.requires("jax",
why)`` / ``@pytest.mark.requires_tool("haproxy", why)``; never ``pytest.importorskip`` or ``skipif`` on one.
"""

import importlib
import importlib.util
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


import pytest  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what: str) -> None:
    """A dependency is missing: skip saying ``what`` locally; fail saying it with ``CI=true``."""
    if IN_CI:
        pytest.fail(f"CI=true and {what}: under CI a missing optional dependency is a failure, not a skip", pytrace=False)
    pytest.skip(f"{what} (with CI=true this fails)")


def installed(module_name: str) -> bool:
    return importlib.util.find_spec(module_name) is not None


def require(module_name: str, why: str):
    """The module ``module_name``, imported; if it is not installed, :func:`missing` says so with ``why`` (what
    needs it and how to install it)."""
    if not installed(module_name):
        missing(f"{module_name} is not installed: {why}")
    return importlib.import_module(module_name)


def require_tool(executable: str, why: str) -> str:
    """The path of the program ``executable``; if it is not on PATH, :func:`missing` says so with ``why``."""
    found = shutil.which(executable)
    if found is None:
        missing(f"{executable} is not on PATH: {why}")
    return found


def pytest_configure(config):
    config.addinivalue_line("markers", "requires(module, why): needs an optional Python package (tests/conftest.py)")
    config.addinivalue_line("markers", "requires_tool(executable, why): needs a program on PATH (tests/conftest.py)")


def pytest_runtest_setup(item):
    for marker in item.iter_markers("requires"):
        require(*marker.args, **marker.kwargs)
    for marker in item.iter_markers("requires_tool"):
        require_tool(*marker.args, **marker.kwargs)


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
