"""User code in a process of its own: :class:`Worker` runs a function in a warm child process.

A team's ``@tf.custom_gradient`` function may end the process that calls it (``os._exit``, a segfault in
native code, ``SystemExit``), block or spin forever, or allocate without bound. The app's server and
the checker therefore never call it themselves: they hand the call to a worker process and get back
its result, its exception, or a :class:`WorkerFailure` that says how the call ended ("did not return
within 20 s", "ended the worker process with exit code 3", "killed the worker process with signal
SIGSEGV", "raised SystemExit(3)"). After such a failure the worker is replaced; the next call works.

Why these choices (see also RUNBOOK.md, "When a team's code misbehaves"):

* No worker is a fork of the server: TensorFlow is not fork-safe once it has been initialised, and the
  server has initialised it. A worker is forked from the process's *fork server*
  (:mod:`explorer.worker.forking`), a fresh interpreter that has imported TensorFlow and Keras and done
  nothing else, so a worker starts (and a killed one is back) in a fraction of a second rather than
  after 4 to 5 CPU-seconds of imports. A worker with environment variables of its own (``KERAS_BACKEND``
  for the JAX and PyTorch comparisons), or every worker with ``GRADIENT_EXPLORER_WORKER_START=spawn``,
  is a fresh interpreter instead: ``python -m explorer.worker.child`` started with :mod:`subprocess`.
  Either talks over a ``multiprocessing`` ``Pipe`` (pickled calls and replies,
  ``multiprocessing.connection.wait`` for the time limit).
  ``multiprocessing.Process`` with ``spawn`` / ``forkserver`` re-runs the parent's ``__main__`` in the
  child, which under Streamlit is the app script itself (it starts pages, and workers, again).
  ``concurrent.futures.ProcessPoolExecutor`` cannot stop one overrunning call (only shut the pool down,
  waiting for it) and turns a dead worker into a broken pool. A :class:`Worker` is one process in a
  process group of its own, so a call that overruns is ended by killing exactly that group.
* A call is ``(function, args, kwargs)`` pickled by reference: this package imports nothing of the
  project, the caller names what runs (``explorer.loaded``, ``explorer.checker``). Arrays and frames
  cross the boundary once per call (a whole sweep is one call, never one call per point).
* Memory: the child sets ``RLIMIT_AS`` (address space) to :func:`memory_cap_mb` MB, so a function that
  allocates without bound gets a MemoryError (or is ended by the allocator) alone.
* A call that leaves a Python thread running in the child (a check whose own time limit abandoned a
  hung backward) retires the worker after its reply: nothing of a bad call keeps a core busy.
* A worker whose parent is gone (a killed server) ends itself within a second, also mid-call.

Operator settings (environment variables, read when a worker starts or a call is made):

* ``GRADIENT_EXPLORER_CALL_SECONDS``: time limit of one sweep or probe of a loaded op (default 20).
* ``GRADIENT_EXPLORER_CHECK_SECONDS``: time limit of the checks of one function or layer (default 300).
* ``GRADIENT_EXPLORER_WORKER_MEMORY_MB``: a worker's address-space cap in MB (default 8192; 0: no cap).
  TensorFlow alone maps about 3 GB of address space (its resident memory is much smaller).
* ``GRADIENT_EXPLORER_WORKER_START``: ``fork`` (default: from the fork server) or ``spawn`` (a fresh
  interpreter per worker).
"""

from explorer.worker.process import (
    CallTimedOut,
    Named,
    NotSendable,
    RemoteError,
    Worker,
    WorkerDied,
    WorkerFailure,
    call_seconds,
    check_seconds,
    close_shared,
    importing,
    memory_cap_mb,
    running_pid,
    shared,
    start_method,
)

__all__ = [
    "CallTimedOut",
    "Named",
    "NotSendable",
    "RemoteError",
    "Worker",
    "WorkerDied",
    "WorkerFailure",
    "call_seconds",
    "check_seconds",
    "close_shared",
    "importing",
    "memory_cap_mb",
    "running_pid",
    "shared",
    "start_method",
]
