"""``python -m explorer verify`` for real: a new process, a real module, the real checks (nothing stubbed).

Exit status (README): 0 when nothing fails, warnings included; 1 when a check fails.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

# The custom gradient is half of the true one everywhere, with no reason declared: every check passes
# except vs_autodiff, which warns ("no justification declared") and does not fail.
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


# The probe: a docstring, and a gradient three times the true one. The docstring declares nothing.
DOCUMENTED_BUT_WRONG = '''
import tensorflow as tf


@tf.custom_gradient
def my_sin(x):
    """Sine."""
    return tf.sin(x), lambda dy: dy * 3.0 * tf.cos(x)   # 3x the true gradient
'''

# A forward for vectors of 7 only, which no input rule guesses, and a backward that is wrong for any input: the
# checker cannot exercise it, so nothing is checked, and nothing checked is not a pass.
NOT_EXERCISED = '''
import tensorflow as tf


@tf.custom_gradient
def needs_seven(x, y):
    """x * y for vectors of 7."""
    return tf.ensure_shape(x, (7,)) * y, lambda dy: (1000.0 * dy, -5.0 * dy)
'''


def _verify(tmp_path: Path, source: str, *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "team_ops.py").write_text(textwrap.dedent(source), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "explorer", "verify", "team_ops.py", *options],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _results(stdout: str) -> dict[str, str]:
    """check -> result, from the table's rows (op, check, result, message)."""
    rows = [line.split() for line in stdout.splitlines() if line.strip()]
    return {row[1]: row[2] for row in rows[1:] if len(row) > 2 and row[2] in ("pass", "skip", "warn", "fail")}


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


def test_a_documented_wrong_gradient_is_not_a_pass(tmp_path):
    done = _verify(tmp_path, DOCUMENTED_BUT_WRONG, "--json")
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert done.returncode == 0, done.stderr[-3000:]  # a warning, not a failure
    vs = rows["vs_autodiff"]
    assert vs["level"] == "warn"
    # cos is sin's derivative: the backward's 3 cos(x) is 3 times it at every point
    assert vs["message"].startswith("the custom gradient is 3 times autodiff: 3 x the true gradient (numerical)")
    assert 'its docstring "Sine." is context, not a declaration' in vs["message"]
    assert 'GRADIENT_EXPLORER = {"my_sin": {"justification": "<why>"}}' in vs["message"]
    assert all(row["level"] == "pass" for name, row in rows.items() if name != "vs_autodiff")


def test_a_function_the_checker_cannot_exercise_fails_every_check_and_exits_1(tmp_path):
    done = _verify(tmp_path, NOT_EXERCISED)
    assert done.returncode == 1, done.stdout + done.stderr
    assert set(_results(done.stdout).values()) == {"fail"}
    assert "not checked: no input shapes found that needs_seven accepts" in done.stdout
    assert "9 checks: 0 pass, 0 warn, 9 fail, 0 skip" in done.stdout
