"""The fork server: a process that has imported TensorFlow and Keras, and forks a worker on request.

A worker forked from it starts in a fraction of a second instead of importing TensorFlow and Keras again
(4 to 5 CPU-seconds each time, half a minute on a busy 2-core host), so a worker that a team's function
ended is back at once, and a server that runs three workers pays for one import, not three.

Why forking here is safe where forking the server is not: TensorFlow is not fork-safe once its runtime is
initialised (the eager context and its thread pools), and the server has initialised it. Importing
TensorFlow initialises neither, and the fork server does nothing else: it never runs an op, never imports
a team's module (each worker does that after the fork, in its warm-up). This is the model of
``multiprocessing``'s ``forkserver`` with a preload; that module is not used because it re-runs the
parent's ``__main__`` (see :mod:`explorer.worker`).

``python -m explorer.worker.forkserver FD`` runs :func:`main`: FD is the inherited end of a Unix socket pair (a
``multiprocessing`` ``Connection``, so that a pipe's end can be passed to it as a file descriptor). It
sends ``("ready", pid)`` once its imports are done, then answers, one at a time:

* ``("fork",)`` followed by a file descriptor: forks a worker that serves that pipe's end; ``("forked", pid)``,
  or ``("failed", why)`` when the system refuses the fork;
* ``("status", pid)``: ``("status", code, known)``, the worker's exit code like ``Popen.returncode`` (negative:
  the signal), None while it runs; ``known`` is False for a pid it never forked.

Its environment is fixed at its start; variables that TensorFlow or Keras read at import (see
:data:`IMPORT_TIME_PREFIXES`) therefore key it: the parent starts another one when they change, which stops the
old one and the workers it forked (each is replaced at its next call). Each worker is sent the parent's whole
environment and working directory at its start (:func:`explorer.worker.process.serve`); what else a process has
(its standard streams, umask, resource limits) is the fork server's, taken from the parent when it started.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing import reduction
from multiprocessing.connection import Connection, wait

PRELOAD = ("numpy", "tensorflow", "keras")
# environment variables read while these modules import (Keras's backend, TensorFlow's logging and oneDNN,
# thread counts of the BLAS libraries): a fork server is only used while they are what it started with
IMPORT_TIME_PREFIXES = ("KERAS_", "TF_", "XLA_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_", "LD_")
ANSWER_SECONDS = 60.0  # a fork or a status once the imports are done takes milliseconds


def import_time_environment(environ: dict[str, str] | os._Environ) -> tuple[tuple[str, str], ...]:
    """The variables of ``environ`` that the fork server's imports read (its key)."""
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith(IMPORT_TIME_PREFIXES)))


# -- the fork server process -----------------------------------------------------------------------------
def _forked_worker(control: Connection, fd: int, serve: Callable[[Connection], None]) -> None:
    """The forked child: a worker of its own session serving ``fd``; it never returns to the fork server's loop."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by the fork server around the fork
        control.close()
        os.setsid()  # its own process group, as a spawned worker: the parent stops it by killing that group
        serve(Connection(fd))
        code = 0
    except BaseException:  # noqa: BLE001 - as a spawned worker's interpreter would, say why it ended
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()  # os._exit drops what is buffered: a team's prints
            except Exception:  # noqa: BLE001 - a closed stream
                pass
        os._exit(code)


def main(fd: int, serve: Callable[[Connection], None]) -> None:
    """Import, then fork a worker running ``serve`` per request until the parent closes its end (or is gone:
    the same end of file)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so that the finally below stops the workers
    control = Connection(fd)
    for module in PRELOAD:
        importlib.import_module(module)

    codes: dict[int, int] = {}
    children: set[int] = set()

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            codes[pid] = os.waitstatus_to_exitcode(status)

    try:
        control.send(("ready", os.getpid()))
        while True:
            request = control.recv()
            reap()
            if request[0] == "fork":
                worker_fd = reduction.recv_handle(control)
                # SIGTERM (the parent's close) waits until the child has reset its handler and this loop knows the pid
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
                try:
                    pid = os.fork()
                except OSError as error:  # no memory or process slot left: this worker fails, the others go on
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                    os.close(worker_fd)
                    control.send(("failed", f"fork failed: {error}"))
                    continue
                if pid == 0:
                    _forked_worker(control, worker_fd, serve)
                os.close(worker_fd)
                children.add(pid)
                codes.pop(pid, None)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                control.send(("forked", pid))
            elif request[0] == "status":
                pid = request[1]
                known = pid in children or pid in codes
                control.send(("status", None if pid in children else codes.get(pid), known))
    except (EOFError, OSError):
        return  # the parent closed its end or is gone
    finally:
        for pid in children:  # the parent is gone or closed this server: nothing it forked outlives it
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


# -- the parent's side -----------------------------------------------------------------------------------
class ForkServer:
    """The parent's handle of one fork server process; thread-safe (requests are serialised)."""

    def __init__(self, start_seconds: float) -> None:
        self.key = import_time_environment(os.environ)
        self.start_seconds = start_seconds
        self._lock = threading.RLock()  # a failed request closes the server while holding it
        self._ready = False
        self._broken = False
        parent_end, child_end = _socket_pair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "explorer.worker.forkserver", str(child_end.fileno())],
                pass_fds=(child_end.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the operator's terminal is the server's to handle
            )
        finally:
            child_end.close()
        self._connection = parent_end

    @property
    def ready(self) -> bool:
        """Its imports are done: a fork is answered at once."""
        return self._ready and not self._broken

    @property
    def usable(self) -> bool:
        return not self._broken and self.process.poll() is None

    def _request(self, message: tuple, handle: int | None = None) -> tuple:
        """Send ``message`` (and ``handle``) and return the answer; OSError if the fork server is gone."""
        if self._broken:
            raise OSError("the fork server stopped")
        try:
            if not self._ready:
                if not wait([self._connection], self.start_seconds):
                    raise OSError(f"the fork server did not start within {self.start_seconds:g} s")
                if self._connection.recv()[0] != "ready":
                    raise OSError("the fork server did not start")
                self._ready = True
            self._connection.send(message)
            if handle is not None:
                reduction.send_handle(self._connection, handle, self.process.pid)
            if not wait([self._connection], ANSWER_SECONDS):  # stopped or stuck: never hold the workers' calls
                raise OSError(f"the fork server did not answer within {ANSWER_SECONDS:g} s")
            return self._connection.recv()
        except (EOFError, OSError, TypeError, ValueError) as error:  # TypeError, ValueError: closed meanwhile
            self.close()
            raise OSError(f"the fork server stopped: {error}") from None
        except BaseException:  # KeyboardInterrupt mid-request: its answer would be read by the next request
            self.close()
            raise

    def fork(self, fd: int) -> int:
        """Fork a worker that serves ``fd`` (this process's copy stays open); its pid. OSError if it could not."""
        with self._lock:
            kind, value = self._request(("fork",), fd)
        if kind != "forked":
            raise OSError(value)
        return value

    def exitcode(self, pid: int) -> int | None:
        """The exit code of worker ``pid`` (negative: the signal), None while it runs; OSError if unknown."""
        with self._lock:
            _, code, known = self._request(("status", pid))
        if not known:
            raise OSError(f"the fork server did not fork pid {pid}")
        return code

    def close(self) -> None:
        """Stop the fork server (the workers it forked are killed with it). The process goes first, so that a
        request in flight on another thread reads end of file; the connection is closed once none is."""
        self._broken = True
        if self.process.poll() is None:
            try:
                self.process.terminate()  # its loop ends on the closed connection anyway; this ends an import
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with self._lock:
            self._connection.close()


def _socket_pair() -> tuple[Connection, Connection]:
    from multiprocessing import Pipe

    return Pipe(duplex=True)  # on Unix a socket pair: it can carry file descriptors


_CURRENT: ForkServer | None = None
_CURRENT_LOCK = threading.Lock()


def current_fork_server(start_seconds: float) -> ForkServer:
    """This process's fork server for its environment now, started if there is none (or it stopped)."""
    global _CURRENT
    with _CURRENT_LOCK:
        found = _CURRENT
        if found is not None and found.usable and found.key == import_time_environment(os.environ):
            return found
        if found is not None:
            found.close()
        _CURRENT = ForkServer(start_seconds)
        return _CURRENT


def running_pid() -> int | None:
    """The pid of this process's fork server, if one runs (tests leave it out of "what a call left running")."""
    found = _CURRENT
    return found.process.pid if found is not None and found.process.poll() is None else None


def stop() -> None:
    """Stop this process's fork server, if any."""
    global _CURRENT
    with _CURRENT_LOCK:
        found, _CURRENT = _CURRENT, None
    if found is not None:
        found.close()


def wait_for_exitcode(server: ForkServer, pid: int, timeout: float | None) -> int | None:
    """Worker ``pid``'s exit code once it ended (None: the fork server is gone and cannot say);
    ``subprocess.TimeoutExpired`` if it still runs after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            code = server.exitcode(pid)
        except OSError:
            return None
        if code is not None:
            return code
        if deadline is not None and time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(f"worker {pid}", timeout or 0.0)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
