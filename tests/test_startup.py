"""explorer.ui.runtime.startup_imports: the app imports with Python's cyclic collector paused, once per process."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FIRST_RUN_COLLECTIONS = """
import gc, sys
from streamlit.testing.v1 import AppTest
assert "tensorflow" not in sys.modules
started = []
gc.callbacks.append(lambda phase, info: started.append(info["generation"]) if phase == "start" else None)
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.run()
assert not at.exception, at.exception
assert "tensorflow" in sys.modules
print(started.count(2), gc.isenabled(), gc.get_freeze_count())
"""


@pytest.mark.slow  # a fresh process imports TensorFlow and runs the app
def test_the_first_run_imports_tensorflow_without_a_full_collection_and_leaves_the_collector_on():
    """Unpaused, the same run starts 5 full collections (and ~800 younger ones) while TensorFlow imports."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_RUN_COLLECTIONS, str(ROOT / "app.py")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    full_collections, enabled, frozen = done.stdout.split()[-3:]
    assert int(full_collections) == 0
    assert enabled == "True"
    assert int(frozen) > 300_000  # the imports' objects (~600,000), out of later collections' way


def _fresh_process_state(monkeypatch) -> list[int]:
    """runtime as in a process that has not started yet; gc.freeze recorded, not done to pytest's process."""
    from explorer.ui import runtime

    freezes: list[int] = []
    monkeypatch.setattr(runtime, "_STARTED", False)
    monkeypatch.setattr(runtime.gc, "freeze", lambda: freezes.append(1))
    return freezes


def test_only_the_first_entrant_pauses_and_the_collector_always_runs_again(monkeypatch):
    """Sessions' script threads may enter together: a later entrant must neither pause nor resume."""
    from explorer.ui import runtime

    freezes = _fresh_process_state(monkeypatch)
    assert gc.isenabled()
    with runtime.startup_imports():
        assert not gc.isenabled()
        with runtime.startup_imports():  # a second session meanwhile
            assert not gc.isenabled()
        assert not gc.isenabled()  # the second one's exit did not resume it under the first
        assert not freezes
    assert gc.isenabled() and freezes == [1]
    with runtime.startup_imports():  # every later run of the script
        assert gc.isenabled()
    assert gc.isenabled() and freezes == [1]


def test_a_failing_import_still_resumes_the_collector(monkeypatch):
    from explorer.ui import runtime

    _fresh_process_state(monkeypatch)
    try:
        with runtime.startup_imports():
            assert not gc.isenabled()
            raise ImportError("a broken dependency")
    except ImportError:
        pass
    assert gc.isenabled()
