"""The worker process and its protocol (see :mod:`explorer.worker` for why it is built this way).

The child is ``python -m explorer.worker.child FD`` started with :mod:`subprocess` (not
``multiprocessing.Process``: its ``spawn`` re-runs the parent's ``__main__``, which under Streamlit is
the app script itself), talking over a ``multiprocessing`` ``Pipe`` whose end it inherits as FD.

A worker without environment variables of its own is forked from the process's fork server instead
(:mod:`explorer.worker.forking`: TensorFlow and Keras already imported), serving the same pipe.

Protocol over that pipe: the parent first sends ``(sys.path, memory cap in MB, warm-up calls, (environment,
working directory))`` (the parent's, for a forked worker; None for a spawned one, which has them already); the
child sends ``("ready", pid)`` once its warm-up calls are done;
then for every ``(function, args, kwargs)`` it receives it answers ``("ok", value, threads_left)`` or
``("raised", exception, threads_left)``; for ``SystemExit`` / ``KeyboardInterrupt`` it answers
``("ended", text)`` and exits. ``threads_left`` > 0 means the call left a Python thread running: the
parent retires that worker. Anything else (no answer within the time limit, the process gone) is
seen by the parent, which kills and replaces the worker.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from explorer.worker.forking import ForkServer, current_fork_server, wait_for_exitcode

CALL_SECONDS_ENV = "GRADIENT_EXPLORER_CALL_SECONDS"
CHECK_SECONDS_ENV = "GRADIENT_EXPLORER_CHECK_SECONDS"
MEMORY_ENV = "GRADIENT_EXPLORER_WORKER_MEMORY_MB"
START_ENV = "GRADIENT_EXPLORER_WORKER_START"
START_METHODS = ("fork", "spawn")  # fork: from the fork server (the default); spawn: a fresh interpreter each
DEFAULT_CALL_SECONDS = 20.0
DEFAULT_CHECK_SECONDS = 300.0
DEFAULT_MEMORY_MB = 8192
START_SECONDS = 300.0  # importing TensorFlow and the operator's modules; on a busy 2-core host this is slow
EXIT_ON_BASE_EXCEPTION = 70  # the child's exit code after it reported SystemExit / KeyboardInterrupt

Warm = Sequence[tuple[Callable[..., Any], tuple]]


def _seconds(env: str, default: float) -> float:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{env}={text!r} is not a number of seconds; allowed: a number > 0") from None
    if not value > 0:
        raise ValueError(f"{env}={text!r}; allowed: a number of seconds > 0")
    return value


def call_seconds() -> float:
    """The time limit of one sweep or probe of a loaded op (``GRADIENT_EXPLORER_CALL_SECONDS``, default 20)."""
    return _seconds(CALL_SECONDS_ENV, DEFAULT_CALL_SECONDS)


def check_seconds() -> float:
    """The time limit of the checks of one function (``GRADIENT_EXPLORER_CHECK_SECONDS``, default 300)."""
    return _seconds(CHECK_SECONDS_ENV, DEFAULT_CHECK_SECONDS)


def memory_cap_mb() -> int:
    """A worker's address-space cap in MB (``GRADIENT_EXPLORER_WORKER_MEMORY_MB``, default 8192, 0 = none)."""
    text = os.environ.get(MEMORY_ENV, "").strip()
    if not text:
        return DEFAULT_MEMORY_MB
    if not text.isdigit():
        raise ValueError(f"{MEMORY_ENV}={text!r}; allowed: a whole number of MB >= 0 (0: no cap)")
    return int(text)


def start_method() -> str:
    """How a worker without variables of its own starts (``GRADIENT_EXPLORER_WORKER_START``): ``fork`` from
    the fork server (default) or ``spawn`` a fresh interpreter (slower; for an environment where forking a
    process that has imported TensorFlow misbehaves)."""
    text = os.environ.get(START_ENV, "").strip() or START_METHODS[0]
    if text not in START_METHODS:
        raise ValueError(f"{START_ENV}={text!r}; allowed: {' or '.join(START_METHODS)}")
    return text


class WorkerFailure(Exception):
    """The call did not give a result or an exception: ``how`` says what happened to it."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class CallTimedOut(WorkerFailure, TimeoutError):
    """The call did not return within its time limit; its worker was killed."""


class WorkerDied(WorkerFailure):
    """The worker process ended during the call (exit, signal, SystemExit, KeyboardInterrupt)."""


class NotSendable(TypeError):
    """The call's function or arguments do not pickle (a lambda, a local function): it was not sent."""


class RemoteError(Exception):
    """An exception of the child that could not be pickled: its type's name and its text."""

    def __init__(self, type_name: str, text: str) -> None:
        super().__init__(type_name, text)
        self.type_name, self.text = type_name, text

    def __str__(self) -> str:
        return f"{self.type_name}: {self.text}" if self.text else self.type_name


def how_it_ended(exitcode: int | None) -> str:
    """``exit code 3`` / ``signal SIGSEGV`` for a process's ``exitcode`` (negative: the signal)."""
    if exitcode is None:
        return "closed its pipe to the server and stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (the kernel's out-of-memory killer sends it too)" if name == "SIGKILL" else ""
        return f"killed the worker process with signal {name}{hint}"
    return f"ended the worker process with exit code {exitcode}"


# -- the child -------------------------------------------------------------------------------------------
def _cap_memory(megabytes: int) -> None:
    if megabytes <= 0:
        return
    import resource

    limit = megabytes * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _die_with_parent() -> None:
    """End this process when its parent is gone (a killed server leaves no worker behind), also while
    a call hangs: a daemon thread checks the parent's pid once a second. (``PR_SET_PDEATHSIG`` would
    fire when the parent *thread* ends, and Streamlit starts the worker from a script thread.)"""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(EXIT_ON_BASE_EXCEPTION)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _portable(error: BaseException) -> BaseException:
    """``error`` if it pickles (and unpickles), else a RemoteError with its type's name and text."""
    try:
        pickle.loads(pickle.dumps(error))
        return error.with_traceback(None)
    except Exception:  # noqa: BLE001 - any exception type of user code
        return RemoteError(type(error).__name__, str(error))


def serve(connection: Connection) -> None:
    """The child's main loop (:mod:`explorer.worker.child` calls it)."""
    _die_with_parent()
    path, memory_mb, warm, forked = connection.recv()
    if forked is not None:  # the fork server's environment and folder are the parent's when it started, not now
        environ, folder = forked
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(folder)
    sys.path[:] = path  # the parent's: a team's test module or the operator's cwd imports the same here
    _cap_memory(memory_mb)
    for function, args in warm:
        function(*args)
    baseline = threading.active_count()
    connection.send(("ready", os.getpid()))
    while True:
        try:
            function, args, kwargs = connection.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple = ("ok", function(*args, **kwargs))
        except Exception as error:  # noqa: BLE001 - passed to the caller
            reply = ("raised", _portable(error))
        except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: this process ends
            arguments = ", ".join(repr(a) for a in error.args)
            connection.send(("ended", f"raised {type(error).__name__}({arguments})"))
            os._exit(EXIT_ON_BASE_EXCEPTION)
        threads_left = threading.active_count() - baseline
        try:
            connection.send((*reply, threads_left))
        except Exception as error:  # noqa: BLE001 - a result that does not pickle
            connection.send(("raised", RuntimeError(f"the result could not be sent back: {error}"), threads_left))
        if threads_left > 0:
            os._exit(0)  # the parent retires this worker; exiting now stops the abandoned thread at once


# -- the parent ------------------------------------------------------------------------------------------
class _Forked:
    """A worker forked by the fork server, with the parts of ``subprocess.Popen`` a :class:`Worker` uses.

    While the fork server still imports TensorFlow the fork is asked for on a thread, so that starting a worker
    returns at once; ``pid`` waits for it (None: the fork server failed, and the worker's pipe reads end of
    file). Exit codes come from the fork server, whose child the worker is."""

    def __init__(self, server: ForkServer, child_end: Connection) -> None:
        self._server = server
        self._pid: int | None = None
        self._forked = threading.Event()
        self._pending = threading.Lock()  # the fork's outcome against a kill that comes before it
        self._cancelled = False
        self.returncode: int | None = None
        if server.ready:
            self._fork(child_end)  # a few milliseconds
        else:
            threading.Thread(target=self._fork, args=(child_end,), name="fork-worker", daemon=True).start()

    def _fork(self, child_end: Connection) -> None:
        try:
            pid = self._server.fork(child_end.fileno())
        except OSError:
            pid = None
        finally:
            child_end.close()  # the worker has its own copy; without a worker the parent's end reads end of file
        with self._pending:
            self._pid = pid
            self._forked.set()
            cancelled = self._cancelled
        if cancelled and pid is not None:  # stopped before it existed: it goes now
            _signal_group(pid)

    @property
    def pid(self) -> int | None:
        self._forked.wait()
        return self._pid

    @property
    def gone(self) -> bool:
        """Its fork server stopped (it stops the workers it forked): the worker is gone or going, exit code unknown."""
        return not self._server.usable

    def poll(self) -> int | None:
        if self.returncode is None and self._forked.is_set() and self._pid is not None:
            try:
                self.returncode = self._server.exitcode(self._pid)
            except OSError:
                pass  # the fork server is gone: so is the worker (``gone``), and its pipe says so
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        started = time.monotonic()
        with self._pending:
            if not self._forked.is_set() and self._cancelled:
                return None  # killed as soon as it is forked; the fork server reaps it
        if not self._forked.wait(timeout):
            raise subprocess.TimeoutExpired("worker", timeout or 0.0)
        if self._pid is None or self.returncode is not None:
            return self.returncode
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        self.returncode = wait_for_exitcode(self._server, self._pid, left)
        return self.returncode

    def kill_group(self) -> None:
        """SIGKILL its process group, now or, while the fork is still pending, as soon as it is forked."""
        with self._pending:
            if not self._forked.is_set():
                self._cancelled = True
                return
        if self._pid is not None and self.poll() is None:
            _signal_group(self._pid)


def _signal_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_group(process: subprocess.Popen | _Forked) -> None:
    """SIGKILL the worker's process group (the worker and anything it started), if it still runs."""
    if isinstance(process, _Forked):
        process.kill_group()
        return
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            process.kill()
        except OSError:
            pass


class Worker:
    """One warm child process that runs calls one at a time (:meth:`call`); replaced when it fails.

    ``warm``: ``(function, args)`` pairs the child calls once at start (imports, loading the operator's
    modules); ``env``: variables added to the child's environment (``KERAS_BACKEND``, which Keras reads once). :meth:`start` returns at once; the first call waits for the warm-up (not counted in its
    time limit). Thread-safe: concurrent calls queue on a lock.
    """

    def __init__(self, name: str, warm: Warm = (), env: dict[str, str] | None = None) -> None:
        self.name = name
        self.warm = tuple(warm)
        self.env = dict(env or {})  # set in the child's environment before it imports anything (KERAS_BACKEND)
        self._lock = threading.Lock()
        self._process: subprocess.Popen | _Forked | None = None
        self._connection: Connection | None = None
        self._ready = False
        self._closed = False
        self.started = 0  # processes started so far (a replaced worker counts again)
        self.start_seconds: float | None = None  # the last start's warm-up, as the parent waited for it

    # life cycle
    def start(self) -> None:
        """Start the child if none is running (non-blocking)."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        process = self._process
        if process is not None and process.poll() is None and not (isinstance(process, _Forked) and process.gone):
            return
        self._stop()
        memory = memory_cap_mb()
        forked = not self.env and start_method() == "fork"
        parent_end, child_end = multiprocessing.Pipe(duplex=True)
        self._started_at = time.perf_counter()
        process: subprocess.Popen | _Forked
        if forked:
            process = _Forked(current_fork_server(START_SECONDS), child_end)  # closes child_end once forked
        else:
            try:
                process = subprocess.Popen(
                    [sys.executable, "-m", "explorer.worker.child", str(child_end.fileno()), self.name],
                    pass_fds=(child_end.fileno(),),
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **self.env} if self.env else None,
                    start_new_session=True,  # its own process group: stopping it stops what it started too
                )
            finally:
                child_end.close()
        self._process, self._connection, self._ready = process, parent_end, False
        self.started += 1
        try:
            parent_end.send((list(sys.path), memory, self.warm, (dict(os.environ), os.getcwd()) if forked else None))
        except (BrokenPipeError, OSError):
            pass  # it died at once: the first call reports how

    def _stop(self) -> None:
        """Kill the child (if any) and reap it: nothing of it is left running."""
        process, connection = self._process, self._connection
        self._process, self._connection, self._ready = None, None, False
        if connection is not None:
            connection.close()
        if process is not None:
            _kill_group(process)
            process.wait()

    def close(self) -> None:
        """Stop for good: the child is killed at once, also in the middle of a call (which then raises
        WorkerDied); later calls raise WorkerDied too."""
        self._closed = True
        process = self._process
        if process is not None:
            _kill_group(process)
        with self._lock:
            self._stop()

    @property
    def pid(self) -> int | None:
        process = self._process
        return None if process is None else process.pid

    def _wait_ready(self) -> None:
        assert self._process is not None and self._connection is not None
        if self._ready:
            return
        ready = wait([self._connection], START_SECONDS)
        if ready:
            try:
                message = self._connection.recv()
            except (EOFError, OSError):
                message = None
            if message is not None and message[0] == "ready":
                self._ready = True
                self.start_seconds = time.perf_counter() - self._started_at
                return
        if not ready:
            self._stop()
            raise CallTimedOut(f"the worker process did not start within {START_SECONDS:g} s")
        how = how_it_ended(self._exitcode(self._process))
        self._stop()
        raise WorkerDied(f"{how} while it started (importing the operator's modules)")

    @staticmethod
    def _exitcode(process: subprocess.Popen | _Forked) -> int | None:
        """The exit code of a child whose pipe closed (negative: the signal); None if it still runs."""
        try:
            return process.wait(10)
        except subprocess.TimeoutExpired:  # it closed the pipe but lives on: treat as gone
            return None

    # calls
    def call(self, function: Callable[..., Any], *args: Any, time_limit: float, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in the child: its value, its exception re-raised, or a
        :class:`WorkerFailure` (CallTimedOut / WorkerDied) after which the worker is replaced."""
        if not time_limit > 0:
            raise ValueError(f"time_limit must be > 0 seconds, got {time_limit!r}")
        with self._lock:
            if self._closed:
                raise WorkerDied("was stopped (its ops were reloaded or the server is shutting down)")
            self._start()
            self._wait_ready()
            process, connection = self._process, self._connection
            assert process is not None and connection is not None
            try:
                connection.send((function, args, kwargs))
            except (pickle.PicklingError, TypeError, AttributeError) as error:
                raise NotSendable(f"cannot send this call to the worker process: {error}") from None
            except OSError:
                pass  # it ended since its last call (its fork server was killed): its pipe reads end of file
            ready = wait([connection], time_limit)  # readable: a reply, or end of file when the child is gone
            reply = None
            if ready:
                try:
                    reply = connection.recv()
                except (EOFError, OSError):
                    reply = None
                except Exception as error:  # noqa: BLE001 - a reply that does not unpickle here
                    reply = ("raised", RemoteError(type(error).__name__, f"the result could not be read: {error}"), 0)
            if reply is None:
                if not ready:
                    self._stop()
                    if not self._closed:
                        self._start()  # warm the replacement now, while the caller reports the failure
                    raise CallTimedOut(f"did not return within {time_limit:g} s (its worker process was stopped)")
                how = how_it_ended(self._exitcode(process))
                self._stop()
                if self._closed:
                    raise WorkerDied("was stopped (its ops were reloaded or the server is shutting down)")
                self._start()
                raise WorkerDied(how)
            if reply[0] == "ended":
                self._stop()
                if not self._closed:
                    self._start()
                raise WorkerDied(f"{reply[1]}, which ends a process")
            kind, value, threads_left = reply
            if threads_left > 0:
                self._stop()
                if not self._closed:
                    self._start()
            if kind == "raised":
                raise value
            return value


@dataclass(frozen=True)
class Named:
    """A function by module and name: pickled as two strings, imported where it is called (so a caller
    can start a worker without importing what the worker will run, e.g. TensorFlow)."""

    module: str
    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)


def importing(*modules: str) -> Warm:
    """A warm-up that imports ``modules`` at the worker's start (e.g. the checker's entry point), so its
    first call does not pay for them; equal for equal modules (:func:`shared` keeps the worker)."""
    return tuple((Named("importlib", "import_module"), (module,)) for module in modules)


_SHARED: dict[str, tuple[Warm, Worker]] = {}
_SHARED_LOCK = threading.Lock()


def shared(name: str, warm: Warm) -> Worker:
    """The process-wide started worker ``name`` for this warm-up; one with another warm-up is closed first
    (the operator's modules changed: tests reload them)."""
    warm = tuple(warm)
    with _SHARED_LOCK:
        found = _SHARED.get(name)
        if found is not None and found[0] == warm:
            return found[1]
        if found is not None:
            found[1].close()
        running = Worker(name, warm)
        running.start()
        _SHARED[name] = (warm, running)
        return running


def running_pid(name: str) -> int | None:
    """The process id of shared worker ``name``'s child, if it runs."""
    with _SHARED_LOCK:
        found = _SHARED.get(name)
    return None if found is None else found[1].pid


def close_shared(name: str) -> None:
    with _SHARED_LOCK:
        found = _SHARED.pop(name, None)
    if found is not None:
        found[1].close()
