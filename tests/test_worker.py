"""explorer.worker: a call that ends, kills or blocks its worker process is a named failure, the worker
is replaced, the next call works, and nothing of the bad call is left running."""

import os
import threading

import psutil
import pytest

from explorer import worker
from tests.fixtures import worker_calls as calls
from tests.processes import started_children

LIMIT = 30.0  # seconds: a generous limit for calls that return; the hanging calls get SHORT
SHORT = 1.0  # the time limit the hanging calls are cut off at (a call's own setting, not a wall-clock bound)


@pytest.fixture(params=worker.process.START_METHODS)
def plain(request, monkeypatch):
    """A worker without warm-up, forked from the fork server or spawned (no TensorFlow), closed after the test."""
    monkeypatch.setenv(worker.process.START_ENV, request.param)
    running = worker.Worker("test")
    yield running
    running.close()


_children = started_children


def test_a_call_returns_its_value_and_raises_its_exception_in_another_process(plain):
    assert plain.call(calls.add, 2, 40, time_limit=LIMIT) == 42
    assert plain.call(calls.pid, time_limit=LIMIT) not in (os.getpid(), None)
    with pytest.raises(ValueError, match="^bad input$"):
        plain.call(calls.raise_value_error, "bad input", time_limit=LIMIT)
    with pytest.raises(worker.RemoteError, match="Unpicklable: holds a lock"):  # an exception that cannot come back
        plain.call(calls.raise_unpicklable, time_limit=LIMIT)
    assert plain.started == 1  # an exception does not cost the worker
    with pytest.raises(worker.NotSendable):
        plain.call(lambda: 1, time_limit=LIMIT)
    with pytest.raises(ValueError, match="time_limit must be > 0"):
        plain.call(calls.add, 1, 2, time_limit=0)


@pytest.mark.parametrize(
    ("function", "args", "how"),
    [
        (calls.exit_with, (3,), "ended the worker process with exit code 3"),
        (calls.segfault, (), "killed the worker process with signal SIGSEGV"),
        (calls.kill_self, (), "killed the worker process with signal SIGKILL (the kernel's out-of-memory killer"),
        (calls.raise_system_exit, (4,), "raised SystemExit(4), which ends a process"),
        (calls.raise_keyboard_interrupt, (), "raised KeyboardInterrupt(), which ends a process"),
    ],
    ids=["os_exit", "sigsegv", "sigkill", "system_exit", "keyboard_interrupt"],
)
def test_a_call_that_ends_its_worker_is_named_and_the_worker_replaced(plain, function, args, how):
    first = plain.call(calls.pid, time_limit=LIMIT)
    with pytest.raises(worker.WorkerDied) as raised:
        plain.call(function, *args, time_limit=LIMIT)
    assert raised.value.how.startswith(how)
    assert not psutil.pid_exists(first)  # reaped
    second = plain.call(calls.pid, time_limit=LIMIT)  # the next call works, in a new process
    assert second != first and plain.call(calls.add, 1, 1, time_limit=LIMIT) == 2
    assert plain.started == 2


@pytest.mark.parametrize("function", [calls.sleep_forever, calls.spin_forever], ids=["sleeps", "spins"])
def test_after_the_time_limit_nothing_of_the_call_is_left_running(plain, function):
    first = plain.call(calls.pid, time_limit=LIMIT)
    threads = threading.active_count()
    assert _children() == {first}
    with pytest.raises(worker.CallTimedOut, match=f"^did not return within {SHORT:g} s"):
        plain.call(function, time_limit=SHORT)
    assert not psutil.pid_exists(first)  # killed and reaped: not even a zombie
    assert threading.active_count() == threads  # the parent waited on a pipe, it started no thread
    second = plain.pid
    assert _children() == {second} and second != first  # the replacement only
    assert plain.call(calls.add, 20, 22, time_limit=LIMIT) == 42
    plain.close()
    assert _children() == set() and not psutil.pid_exists(second)


def test_a_call_that_leaves_a_thread_running_retires_its_worker(plain):
    first = plain.call(calls.pid, time_limit=LIMIT)
    assert plain.call(calls.leave_a_spinning_thread, time_limit=LIMIT) == "returned"
    assert not psutil.pid_exists(first)  # the spinning thread went with its process
    assert plain.call(calls.pid, time_limit=LIMIT) != first


def test_the_memory_cap_fails_a_call_that_allocates_too_much_alone(plain, monkeypatch):
    base = plain.call(calls.address_space_mb, time_limit=LIMIT)  # uncapped (the 8 GB default is far above)
    assert plain.call(calls.allocate, 1024, time_limit=LIMIT) == 1024**3
    monkeypatch.setenv(worker.process.MEMORY_ENV, str(base + 300))
    capped = worker.Worker("capped")
    try:
        assert capped.call(calls.allocate, 100, time_limit=LIMIT) == 100 * 1024 * 1024
        with pytest.raises(MemoryError):
            capped.call(calls.allocate, 1024, time_limit=LIMIT)
        assert capped.call(calls.add, 1, 2, time_limit=LIMIT) == 3 and capped.started == 1
    finally:
        capped.close()


@pytest.mark.parametrize(
    ("env", "value", "words"),
    [
        ("GRADIENT_EXPLORER_CALL_SECONDS", "soon", "is not a number of seconds"),
        ("GRADIENT_EXPLORER_CHECK_SECONDS", "-1", "allowed: a number of seconds > 0"),
        ("GRADIENT_EXPLORER_WORKER_MEMORY_MB", "2.5", "allowed: a whole number of MB >= 0"),
    ],
)
def test_settings_are_read_from_the_environment_and_checked(monkeypatch, env, value, words):
    assert (worker.call_seconds(), worker.check_seconds(), worker.memory_cap_mb()) == (20.0, 300.0, 8192)
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=words):
        worker.call_seconds() if "CALL" in env else worker.check_seconds() if "CHECK" in env else worker.memory_cap_mb()
    monkeypatch.setenv(env, "7")
    assert {"CALL": worker.call_seconds, "CHECK": worker.check_seconds, "MEMORY": worker.memory_cap_mb}[env.split("_")[2] if "MEMORY" not in env else "MEMORY"]() == 7


PARENT = """
import sys
from explorer import worker
from tests.fixtures import worker_calls as calls
running = worker.Worker("orphan-test")
print(running.call(calls.pid, time_limit=60), flush=True)
running.call(calls.sleep_forever, time_limit=10**6)
"""


@pytest.mark.parametrize("method", worker.process.START_METHODS)
def test_a_worker_ends_when_its_parent_is_killed_even_in_the_middle_of_a_call(method):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), worker.process.START_ENV: method}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=root, stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    assert psutil.pid_exists(child)
    parent.kill()
    parent.wait()
    psutil.Process(child).wait(timeout=60)  # an event: the child's end (it checks once a second)
    assert not psutil.pid_exists(child)


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it (it runs nothing)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_process_the_call_started_is_stopped_with_its_worker(plain):
    sleeper = plain.call(calls.start_a_sleeping_process, time_limit=LIMIT)
    assert not _ended(sleeper)
    with pytest.raises(worker.CallTimedOut):
        plain.call(calls.sleep_forever, time_limit=SHORT)
    psutil.wait_procs([psutil.Process(sleeper)] if psutil.pid_exists(sleeper) else [], timeout=30)
    assert _ended(sleeper)
