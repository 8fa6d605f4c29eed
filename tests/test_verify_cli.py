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


def _verify(tmp_path: Path, sources: list[str], *options: str) -> subprocess.CompletedProcess:
    """``python -m explorer verify team_ops.py`` of the ``sources`` in one module: one process (one TensorFlow
    import) for several cases; each function is checked in its own worker, so they do not see each other."""
    module = "\n\n".join(textwrap.dedent(source) for source in sources)
    (tmp_path / "team_ops.py").write_text(module, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "explorer", "verify", "team_ops.py", *options],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _results(stdout: str) -> dict[tuple[str, str], str]:
    """(op, check) -> result, from the table's rows (op, check, result, message)."""
    rows = [line.split() for line in stdout.splitlines() if line.strip()]
    return {(row[0], row[1]): row[2] for row in rows[1:] if len(row) > 2 and row[2] in ("pass", "skip", "warn", "fail")}


def _of(results: dict[tuple[str, str], str], op: str) -> dict[str, str]:
    return {check: result for (name, check), result in results.items() if name == op}


def test_only_warnings_exit_0_and_a_documented_wrong_gradient_is_not_a_pass(tmp_path):
    """Two modules' worth of cases in one run (--json): each only warns, so the run exits 0."""
    done = _verify(tmp_path, [ONLY_A_WARNING, DOCUMENTED_BUT_WRONG], "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    every = json.loads(done.stdout)
    assert {row["op"] for row in every} == {"half_gradient_identity", "my_sin"}
    assert all(row["level"] != "fail" for row in every)  # what the table's "0 fail" says
    # the half gradient: vs_autodiff warns, nothing fails
    half = {row["check"]: row["level"] for row in every if row["op"] == "half_gradient_identity"}
    assert half["vs_autodiff"] == "warn"
    assert set(half.values()) == {"pass", "warn"}  # a warning was there, and nothing failed
    # the documented wrong gradient
    rows = {row["check"]: row for row in every if row["op"] == "my_sin"}
    vs = rows["vs_autodiff"]
    assert vs["level"] == "warn"
    # cos is sin's derivative: the backward's 3 cos(x) is 3 times it at every point
    assert vs["message"].startswith("the custom gradient is 3 times autodiff: 3 x the true gradient (numerical)")
    assert 'its docstring "Sine." is context, not a declaration' in vs["message"]
    assert 'GRADIENT_EXPLORER = {"my_sin": {"justification": "<why>"}}' in vs["message"]
    assert all(row["level"] == "pass" for name, row in rows.items() if name != "vs_autodiff")


def test_a_failed_check_and_a_function_the_checker_cannot_exercise_exit_1(tmp_path):
    """Both failing cases in one run (the table): exit 1; the summary line counts the table's rows."""
    done = _verify(tmp_path, [A_FAILURE, NOT_EXERCISED])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    results = _results(done.stdout)
    assert {op for op, _ in results} == {"double_with_summed_grad", "needs_seven"}
    assert _of(results, "double_with_summed_grad")["shape_dtype"] == "fail"
    # the function the checker cannot exercise: every one of its 9 checks fails, saying why
    unexercised = _of(results, "needs_seven")
    assert len(unexercised) == 9 and set(unexercised.values()) == {"fail"}
    assert "not checked: no input shapes found that needs_seven accepts" in done.stdout
    levels = list(results.values())
    counts = ", ".join(f"{levels.count(level)} {level}" for level in ("pass", "warn", "fail", "skip"))
    assert f"2 op(s), {len(levels)} checks: {counts} in " in done.stdout
