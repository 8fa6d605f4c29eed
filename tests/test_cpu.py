"""explorer.cpu: the app's server runs each TensorFlow op on one thread; the library leaves threading alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # each test starts fresh Python processes that import TensorFlow and the app

FIRST_RUN_THEN_THREADS = """
import sys
import tensorflow as tf
if sys.argv[1] == "app":
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(sys.argv[2], default_timeout=600)
    at.run()
    assert not at.exception, at.exception
elif sys.argv[1] == "library":  # a user's own program
    import explorer
    explorer.sweep("atan", n=101)
else:  # "late": TensorFlow's runtime has started with its default, then the app's setting is asked for
    import explorer
    from explorer import cpu
    explorer.sweep("atan", n=101)
    assert cpu.one_thread_per_op() == 0
print(tf.config.threading.get_intra_op_parallelism_threads())
"""


def _threads_after(mode: str, **env: str) -> int:
    child_env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}
    child_env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", **env})
    done = subprocess.run(
        [sys.executable, "-c", FIRST_RUN_THEN_THREADS, mode, str(ROOT / "app.py")],
        capture_output=True, text=True, cwd=ROOT, env=child_env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def test_the_app_runs_each_op_on_one_thread_and_the_library_leaves_the_default():
    assert _threads_after("app") == 1
    assert _threads_after("library") == 0  # TensorFlow's default: all cores


def test_an_operators_tf_num_intraop_threads_wins():
    assert _threads_after("app", TF_NUM_INTRAOP_THREADS="2") == 0  # left to TensorFlow, which reads it


def test_too_late_in_a_process_is_a_no_op():
    """In a fresh process: in this one an earlier test may already have set 1, and setting the value in
    effect again is no error, so the too-late path would not run."""
    assert _threads_after("late") == 0
