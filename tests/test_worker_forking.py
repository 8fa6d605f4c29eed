"""explorer.worker.forking: workers forked from a fork server that has imported TensorFlow (and done nothing
else) get the parent's environment of the moment, run TensorFlow, and are replaced when the fork server
itself goes; a worker with variables of its own, or ``GRADIENT_EXPLORER_WORKER_START=spawn``, is spawned."""

import os
import signal

import psutil
import pytest

from explorer import worker
from explorer.worker import forking
from tests.fixtures import worker_calls as calls

pytestmark = pytest.mark.slow  # each test starts a fork server (it imports TensorFlow: 4 to 5 CPU-s) or several

LIMIT = 60.0  # seconds: generous, for calls that return


@pytest.fixture
def started(monkeypatch):
    """A function that starts a worker with the start method of the moment; all are closed after the test."""
    monkeypatch.delenv(worker.process.START_ENV, raising=False)
    running: list[worker.Worker] = []

    def start(name: str = "forking-test", env: dict[str, str] | None = None) -> worker.Worker:
        running.append(worker.Worker(name, env=env))
        return running[-1]

    yield start
    for each in running:
        each.close()


def test_a_forked_worker_is_the_fork_servers_child_and_has_tensorflow_imported_not_initialised(started):
    first = started()
    assert first.call(calls.add, 2, 40, time_limit=LIMIT) == 42
    server = forking.running_pid()
    assert server is not None and first.call(os.getppid, time_limit=LIMIT) == server != os.getpid()
    assert psutil.Process(server).ppid() == os.getpid()
    # imported before any warm-up asked for it, and its runtime works after the fork (d/dx x^3 = 3 x^2)
    assert first.call(calls.imported, "tensorflow", time_limit=LIMIT)
    points = [-2.0, 0.0, 0.5, 3.0]
    assert first.call(calls.cube_gradient, points, time_limit=LIMIT) == [3 * x * x for x in points]
    second = started("forking-test-2")  # the same fork server forks the next worker
    assert second.call(os.getppid, time_limit=LIMIT) == server and second.pid != first.pid


def test_a_forked_worker_gets_the_environment_of_its_start_not_the_fork_servers(started, monkeypatch):
    started().call(calls.add, 1, 1, time_limit=LIMIT)  # the fork server runs, with the environment of then
    server = forking.running_pid()
    monkeypatch.setenv("GRADIENT_EXPLORER_TEST_SET_LATER", "later")
    monkeypatch.delenv("HOME", raising=False)
    later = started("later")
    assert later.call(os.getenv, "GRADIENT_EXPLORER_TEST_SET_LATER", time_limit=LIMIT) == "later"
    assert later.call(os.getenv, "HOME", time_limit=LIMIT) is None
    assert later.call(os.getppid, time_limit=LIMIT) == server  # still forked: the variable is read at run time


def test_a_variable_read_at_import_starts_another_fork_server(started, monkeypatch):
    started().call(calls.add, 1, 1, time_limit=LIMIT)
    first_server = forking.running_pid()
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", str(int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")) + 1))
    other = started("other-env")
    assert other.call(os.getppid, time_limit=LIMIT) == forking.running_pid() != first_server
    assert other.call(os.getenv, "TF_CPP_MIN_LOG_LEVEL", time_limit=LIMIT) == os.environ["TF_CPP_MIN_LOG_LEVEL"]
    psutil.wait_procs([psutil.Process(first_server)] if psutil.pid_exists(first_server) else [], timeout=30)
    assert not psutil.pid_exists(first_server)  # the replaced fork server was stopped (and reaped)


def test_when_the_fork_server_is_killed_its_workers_end_and_the_next_call_runs_under_a_new_one(started):
    running = started()
    first = running.call(calls.pid, time_limit=LIMIT)
    server = forking.running_pid()
    os.kill(server, signal.SIGKILL)
    psutil.Process(first).wait(timeout=60)  # an event: the worker notices its parent is gone (once a second)
    second = running.call(calls.pid, time_limit=LIMIT)  # the call is not lost: it runs in a replacement
    assert second != first and running.call(os.getppid, time_limit=LIMIT) == forking.running_pid() != server
    assert running.started == 2


def test_a_forked_worker_works_in_the_folder_of_its_start(started, monkeypatch, tmp_path):
    started().call(calls.add, 1, 1, time_limit=LIMIT)  # the fork server runs, in the folder of then
    monkeypatch.chdir(tmp_path)
    assert started("here").call(os.getcwd, time_limit=LIMIT) == str(tmp_path)


def test_a_worker_closed_before_its_fork_is_never_left_running(started):
    forking.stop()  # the next worker waits for a new fork server's imports
    early = started("closed-early")
    early.start()
    early.close()  # while its fork is pending: it is killed as soon as it is forked
    later = started("later")
    assert later.call(calls.add, 2, 3, time_limit=LIMIT) == 5  # the same fork server, ready now
    server = psutil.Process(forking.running_pid())
    others = [child for child in server.children() if child.pid != later.pid]
    psutil.wait_procs(others, timeout=30)
    assert [c.pid for c in server.children() if c.status() != psutil.STATUS_ZOMBIE] == [later.pid]


def test_a_worker_with_variables_of_its_own_or_start_spawn_is_a_child_of_this_process(started, monkeypatch):
    own = started("own-env", env={"GRADIENT_EXPLORER_TEST_OWN": "yes"})
    assert own.call(os.getppid, time_limit=LIMIT) == os.getpid()
    assert own.call(os.getenv, "GRADIENT_EXPLORER_TEST_OWN", time_limit=LIMIT) == "yes"
    assert not own.call(calls.imported, "tensorflow", time_limit=LIMIT)  # a fresh interpreter, no warm-up
    monkeypatch.setenv(worker.process.START_ENV, "spawn")
    assert started("spawned").call(os.getppid, time_limit=LIMIT) == os.getpid()
    monkeypatch.setenv(worker.process.START_ENV, "thread")
    with pytest.raises(ValueError, match="GRADIENT_EXPLORER_WORKER_START='thread'; allowed: fork or spawn"):
        started("refused").start()
