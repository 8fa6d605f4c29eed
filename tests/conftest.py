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
