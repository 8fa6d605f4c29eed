"""``python -m explorer verify`` for real: a new process, a real module, the real checks (nothing stubbed).

Exit status (README): 0 when nothing fails, warnings included; 1 when a check fails.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

# The custom gradient is half of the true one everywhere, with no reason written down: every check passes
# except vs_autodiff, which warns ("no justification documented") and does not fail.
ONLY_A_WARNING = '''
import tensorflow as tf


@tf.custom_gradient
def half_gradient_identity(x):
    def grad(dy):
        return 0.5 * dy

    return tf.identity(x), grad
'''

# The backward sums dy to a scalar: the gradient's shape is wrong, which fails shape_dtype.
A_FAILURE = '''
import tensorflow as tf


@tf.custom_gradient
def double_with_summed_grad(x):
    def grad(dy):
        return 2.0 * tf.reduce_sum(dy)

    return 2.0 * x, grad
'''


def _verify(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    (tmp_path / "team_ops.py").write_text(textwrap.dedent(source), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "explorer", "verify", "team_ops.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _results(stdout: str) -> dict[str, str]:
    """check -> result, from the table's rows (op, check, result, message)."""
    rows = [line.split() for line in stdout.splitlines() if line.strip()]
    return {row[1]: row[2] for row in rows[1:] if len(row) > 2 and row[2] in ("pass", "warn", "fail")}


def test_only_warnings_exit_0(tmp_path):
    done = _verify(tmp_path, ONLY_A_WARNING)
    results = _results(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results["vs_autodiff"] == "warn"
    assert set(results.values()) == {"pass", "warn"}  # a warning was there, and nothing failed
    assert "0 fail" in done.stdout and "Traceback" not in done.stderr


def test_a_failed_check_exits_1(tmp_path):
    done = _verify(tmp_path, A_FAILURE)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _results(done.stdout)["shape_dtype"] == "fail"
    assert "Traceback" not in done.stderr
