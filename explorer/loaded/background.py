"""The checker's results for loaded ops, in the background lane: they take seconds (a ``Model.fit`` and a
SavedModel export), and the figure must not wait.

:func:`checks` runs them once per (op, parameters) in the background worker, from one thread of this
process (one core for checks, so a sweep keeps the other).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping

import explorer.loaded.catalogue as catalogue
import explorer.loaded.lanes as lanes
from explorer import worker
from explorer.loaded.catalogue import MAX_REMEMBERED
from explorer.loaded.memory import Remembered

CHECK_TIME_LIMIT = 30.0  # seconds per check in the app (the command line allows 120)

_EXECUTOR = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="loaded-checks")
# checks not started yet are dropped when forgotten, not run for ops now forgotten
_CHECKS = Remembered("the checks asked for, per (op, parameters)", MAX_REMEMBERED, on_forget=lambda future: future.cancel())


def _run_checks(key: str, params: dict, time_limit: float) -> tuple:
    """The checks in the background worker; a worker that does not return or ends is one failed row."""
    from explorer.checker.common import Check

    try:
        return lanes.call(
            catalogue.current(), lanes.BACKGROUND, lanes.on_worker("checks"), key, params, time_limit, time_limit=worker.check_seconds()
        )
    except worker.WorkerFailure as error:
        return (Check("worker", False, f"{key}'s checks {error.how}; the worker process was replaced", "fail"),)


def checks(
    key: str, params: Mapping[str, float], *, time_limit: float = CHECK_TIME_LIMIT
) -> concurrent.futures.Future:
    """The checker's results (a tuple of :class:`explorer.checker.common.Check`) for loaded op ``key`` at
    ``params``, as a Future: computed once per (op, parameters) in the background worker. Asking for other
    parameters of the same op cancels its requests not yet started: a slider dragged through ten values
    checks the one it stops at."""
    spec = catalogue.get(key)
    resolved = spec.resolve(params)
    cache_key = (spec.key, tuple(sorted(resolved.items())))
    with _CHECKS.lock:
        future = _CHECKS.get(cache_key)
        if future is not None and not future.cancelled():
            _CHECKS.touch(cache_key)
            return future
        for other_key, other in _CHECKS.items():
            if other_key[0] == spec.key and other.cancel():
                _CHECKS.forget(other_key)
        future = _EXECUTOR.submit(_run_checks, spec.key, dict(resolved), time_limit)
        _CHECKS.remember(cache_key, future)
        return future
