"""The worker lanes of the loaded ops: the one place that knows which worker processes run the operator's
code, how they start, how a call reaches them and how a failure is worded.

Three lanes, each one shared worker (:func:`explorer.worker.shared`) that imports the operator's modules
once at its start and stays warm:

* ``interactive``: sweeps, probes and views (short calls; every session shares it);
* ``background``: the checker's results and finding the op a layer calls (seconds each), so a check never
  delays a sweep; it also imports :data:`CHECKER_ENTRY` at its start;
* ``training``: Train-page sessions with a loaded op or layer (one tick's budget per call).

What runs there is :mod:`explorer.loaded.worker_side`, sent by name (:func:`on_worker`): the server never
imports it. This module imports nothing heavy (no TensorFlow), so :mod:`explorer.serve` can start the
interactive worker before the server imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from explorer import worker

OPS_ENV = "GRADIENT_EXPLORER_OPS"  # comma-separated targets: the operator's modules (read once per server)
INTERACTIVE, BACKGROUND, TRAINING = "interactive", "background", "training"
LANES = (INTERACTIVE, BACKGROUND, TRAINING)
CHECKER_ENTRY = "explorer.checker.plan"  # the checker's entry point: imported where a lane runs checks



class UserOpError(ValueError):
    """A loaded op failed at these inputs: raised, timed out, NaN everywhere, wrong shape or dtype.

    A ValueError, so every view that already reports bad inputs ("Cannot compare: ...") reports it too.
    """


class Operator(Protocol):
    """What a lane needs of the loaded ops (:class:`explorer.loaded.catalogue.Loaded`): where they come from."""

    targets: tuple[str, ...]
    cwd: str


@dataclass(frozen=True)
class Modules:
    """The operator's modules before they are loaded (:mod:`explorer.serve` starts a worker with them)."""

    targets: tuple[str, ...]
    cwd: str


def parse_targets(value: str | None) -> tuple[str, ...]:
    """``"a.py, pkg.mod,,"`` -> ``("a.py", "pkg.mod")``: comma-separated, blanks dropped."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def checker_warm_up() -> tuple:
    """The warm-up of a worker that runs checks: import :data:`CHECKER_ENTRY` (keras and the checks) at its
    start, not during its first check. The command line and the guardrail start theirs with it too."""
    return worker.importing(CHECKER_ENTRY)


def warm_up(targets: Sequence[str], cwd: str, lane: str = INTERACTIVE) -> tuple:
    """What a worker of ``lane`` runs at its start: load the operator's modules (``targets`` from ``cwd``),
    and for the background lane also the checker."""
    if lane not in LANES:
        raise ValueError(f"lane must be one of {', '.join(LANES)}, got {lane!r}")
    start = ((on_worker("start"), (tuple(targets), str(cwd))),)
    return start + checker_warm_up() if lane == BACKGROUND else start


def worker_for(here: Operator, lane: str) -> worker.Worker:
    """The running worker of ``lane`` for the operator's modules ``here``, started (not waited for) if need be."""
    return worker.shared(lane, warm_up(here.targets, here.cwd, lane))


def call(here: Operator, lane: str, function: Callable[..., Any], *args: Any, time_limit: float) -> Any:
    """``function(*args)`` in the worker of ``lane``: its value, its exception, or a
    :class:`explorer.worker.WorkerFailure` saying how the call ended (the worker is then replaced)."""
    return worker_for(here, lane).call(function, *args, time_limit=time_limit)


def stop_workers() -> None:
    for lane in LANES:
        worker.close_shared(lane)


def worker_pids() -> dict[str, int]:
    """The process id of each running worker (for the tests and the runbook's ``ps``)."""
    pids = {lane: worker.running_pid(lane) for lane in LANES}
    return {lane: pid for lane, pid in pids.items() if pid is not None}


# -- failure text --------------------------------------------------------------------------------------------
def error_text(error: BaseException) -> str:
    """``Type: message`` on one line, the last line of a traced error, at most 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "in user code" in lines[0] else " ".join(lines)
    text = text if len(text) <= 300 else text[:297] + "..."
    if isinstance(error, worker.RemoteError):  # an exception that did not pickle: its text names its type
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def failure(key: str, error: BaseException, doing: str) -> UserOpError:
    """The UserOpError for whatever ``error`` a worker call on loaded op ``key`` ended with (``doing``:
    ``"sweep"`` or ``"probe"``)."""
    if isinstance(error, UserOpError):
        return error
    if isinstance(error, worker.WorkerFailure):
        return UserOpError(f"{key} {error.how}; the {doing} was abandoned")
    return UserOpError(f"{key} raised {error_text(error)} while being {'swept' if doing == 'sweep' else 'probed'}")


# -- what runs in the worker ---------------------------------------------------------------------------------
WORKER_SIDE = "explorer.loaded.worker_side"


def on_worker(name: str) -> worker.Named:
    """The body ``name`` of :mod:`explorer.loaded.worker_side`, to send to a lane: named, because the server
    never runs (or imports) what runs in the worker, and that module imports this package's server side."""
    return worker.Named(WORKER_SIDE, name)
