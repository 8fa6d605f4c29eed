"""A team's module whose backwards end or block their process (tests/fixtures/crashing_ops.py): the app's
sweeps, ``python -m explorer verify`` and the guardrail report each failure by how it ended, and go on.

Time limits are the operator's settings, set short here (GRADIENT_EXPLORER_CALL_SECONDS and
GRADIENT_EXPLORER_CHECK_SECONDS), never wall-clock bounds of the test.
"""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest

from explorer import loaded, worker
from explorer.checker import plan
from explorer.testing import assert_custom_gradient
from tests.fixtures import crashing_ops
from tests.processes import serving, started_children

pytestmark = pytest.mark.slow  # every test starts worker processes (and kills them): minutes

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "tests/fixtures/crashing_ops.py"
CALL_SECONDS = 10  # a sweep or probe; the good function's first sweep (a trace) needs ~1 s
# the checks of one function: the good one's need ~15 s on a busy 2-core host (`verify` of it alone: 9.4 s in all,
# discovery and worker start included, at load 9 on 2 cores, 2026-12-05); the sleeping and the spinning backward
# each wait this long in the verify test (90 s made it 272 s, with a core spinning for 90 of them)
CHECK_SECONDS_VERIFY = 45
CHECK_SECONDS_GUARDRAIL = 20  # only bad functions are checked under this one
# how each bad backward ends, as the sweep, the checker and the guardrail name it
CAUSES = {
    "exits_in_backward": "ended the worker process with exit code 3",
    "segfaults_in_backward": "killed the worker process with signal SIGSEGV",
    "sleeps_in_backward": "did not return within {seconds} s",
    "spins_in_backward": "did not return within {seconds} s",
    "system_exit_in_backward": "SystemExit",
}


_children = started_children


@pytest.fixture(scope="module")
def crashing():
    with serving(FIXTURE, CALL_SECONDS) as current:
        assert loaded.start_workers()
        yield current


def _good_sweep_matches_identity() -> None:
    result = loaded.sweep("good_identity", -2.0, 2.0, 201)
    x = result["x"].to_numpy(np.float64)
    np.testing.assert_array_equal(result["forward"], x.astype(np.float32))
    np.testing.assert_array_equal(result["custom_grad"], np.ones_like(x))
    np.testing.assert_allclose(result["true_grad"], np.ones_like(x), rtol=1e-3)  # numerical, of y = x


def test_each_bad_backward_is_a_named_failure_and_the_server_process_goes_on(crashing):
    assert set(crashing.ops) == {"good_identity", *CAUSES}
    _good_sweep_matches_identity()
    threads = threading.active_count()
    for key, cause in CAUSES.items():
        words = cause.format(seconds=CALL_SECONDS)
        with pytest.raises(loaded.UserOpError, match=words.replace("(", r"\(")) as raised:
            loaded.sweep(key)
        assert str(raised.value).startswith(key)
        with pytest.raises(loaded.UserOpError) as again:  # remembered per input: not run a second time
            loaded.sweep(key)
        assert again.value is raised.value
        _good_sweep_matches_identity()  # the replaced worker answers
        assert words in loaded.problem(key)  # the Train page's probe names it too
    # nothing of the bad calls is left: no new thread here, and the only children are the current sweeps'
    # worker and the training worker the Train page's probe starts (the checks' worker starts at the first
    # check, not asked for here)
    assert threading.active_count() == threads
    assert _children() == set(loaded.worker_pids().values()) and set(loaded.worker_pids()) == {"interactive", "training"}
    pids = loaded.worker_pids()
    loaded.stop_workers()
    assert not any(psutil.pid_exists(pid) for pid in pids.values()) and _children() == set()


def test_the_checks_panel_of_a_crashing_function_is_one_failed_row(crashing, monkeypatch):
    monkeypatch.setenv(worker.process.CHECK_SECONDS_ENV, "60")
    [row] = loaded.checks("exits_in_backward", {}).result(timeout=600)
    assert (row.name, row.level) == ("worker", "fail")
    assert "exits_in_backward's checks ended the worker process with exit code 3" in row.message


def test_verify_checks_every_function_and_names_how_each_bad_one_ended():
    """Three functions at once (--jobs 3): the sleeping and the spinning backward each hold a worker of their own
    for the time limit while the others are checked; the rows are still in the module's order."""
    env = {**os.environ, worker.process.CHECK_SECONDS_ENV: str(CHECK_SECONDS_VERIFY), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "verify", FIXTURE, "--json", "--jobs", "3"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    rows = json.loads(done.stdout)  # complete JSON: every function, every check
    functions = ["good_identity", *CAUSES]
    assert [row["op"] for row in rows] == [name for name in functions for _ in plan.FUNCTION_CHECKS]
    assert [row["check"] for row in rows] == list(plan.FUNCTION_CHECKS) * len(functions)
    assert all(row["level"] == "pass" for row in rows if row["op"] == "good_identity")
    for name, cause in CAUSES.items():
        mine = [row for row in rows if row["op"] == name]
        assert all(row["level"] == "fail" for row in mine), name
        assert all(cause.format(seconds=CHECK_SECONDS_VERIFY) in row["message"] for row in mine), (name, mine[0])


def test_the_guardrail_fails_each_bad_function_naming_the_cause_and_the_session_goes_on(monkeypatch):
    monkeypatch.setenv(worker.process.CHECK_SECONDS_ENV, str(CHECK_SECONDS_GUARDRAIL))
    for name, cause in CAUSES.items():
        with pytest.raises(AssertionError) as raised:
            assert_custom_gradient(getattr(crashing_ops, name))
        message = str(raised.value)
        assert message.startswith(f"{name}: ") and "checked in a worker process" in message, name
        assert cause.format(seconds=CHECK_SECONDS_GUARDRAIL) in message, (name, message)
    # the session goes on: the next call gets a working worker, which checks the good function of the same module
    # (that each way of ending leaves a working replacement is test_each_bad_backward_...'s, sweep by sweep)
    monkeypatch.setenv(worker.process.CHECK_SECONDS_ENV, str(CHECK_SECONDS_VERIFY))  # the good one needs ~15 s
    results = assert_custom_gradient(crashing_ops.good_identity)
    assert [(r.name, r.level) for r in results] == [(check, "pass") for check in plan.FUNCTION_CHECKS]
