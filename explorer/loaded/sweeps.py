"""Sweeps of loaded ops, seen from the server: validated here, computed in the interactive lane.

:func:`sweep` probes a loaded op's forward and backward on a few points first (exception, NaN everywhere,
wrong shape or dtype: a :class:`~explorer.loaded.lanes.UserOpError` naming it, in place of the figure),
sweeps it and finds its special points, all in one worker call (the arrays cross once per sweep); when it
fails inside ``tf.function`` (NumPy calls) it is swept eagerly and the graph failure is kept for the page
(:func:`graph_failure`). A call that does not return within its time limit
(:func:`explorer.worker.call_seconds`, 20 s), or that ends its worker (``os._exit``, a segfault,
``SystemExit``), is a UserOpError saying so; the worker is replaced. Failures are remembered per inputs, so
a hung op costs its time limit once, not on every rerun. The returned :class:`explorer.explore.sweeps.Sweep`
carries :func:`evaluate_in_worker`, so zooming in on a point goes to the worker too.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

import explorer.loaded.catalogue as catalogue
import explorer.loaded.lanes as lanes
from explorer import worker
from explorer.explore import sweeps
from explorer.loaded.catalogue import MAX_REMEMBERED
from explorer.loaded.lanes import UserOpError
from explorer.loaded.memory import Remembered

NUMPY_HINT = "NumPy (.numpy(), np.*) inside the function or its backward works only eagerly: use TensorFlow ops"

_FAILURES = Remembered("sweeps that failed, per inputs", MAX_REMEMBERED)
_GRAPH_FAILURES = Remembered("why a loaded op could not run inside tf.function")
_USABLE = Remembered("the Train page's probe of a loaded op, per parameters", MAX_REMEMBERED)


def note_graph_failure(key: str, text: str) -> None:
    """Remember why loaded op ``key`` (or a view of it) failed inside ``tf.function`` (:func:`graph_failure`)."""
    _GRAPH_FAILURES.remember(key, text)


def graph_failure(key: str) -> str | None:
    """Why the loaded op ``key`` could not run inside ``tf.function`` (it is then swept eagerly), or None."""
    failure = _GRAPH_FAILURES.get(key)
    if failure is not None and "numpy" in failure.lower():
        return f"{failure}. Fix: {NUMPY_HINT}"
    return failure


def keyword_note(key: str) -> str | None:
    """For a loaded op with keyword parameters: why it runs here although ``tf.function`` rejects it."""
    spec = catalogue.get(key)
    user = spec.user_function
    if user is None or not user.keyword:
        return None
    return (
        f"keyword parameter(s) {', '.join(user.keyword)}: TensorFlow rejects keyword arguments to a "
        "@tf.custom_gradient function inside tf.function and Model.fit. The views call your undecorated "
        "function positionally, so the curves are yours; the graph check below calls it as declared"
    )


def evaluate_in_worker(result: sweeps.Sweep, x: np.ndarray, dtype: str) -> dict[str, np.ndarray | bool]:
    """:meth:`explorer.explore.sweeps.Sweep.evaluate` of a loaded op's sweep: in the interactive worker."""
    args = (result.spec.key, np.asarray(x), dict(result.params), result.upstream, dtype)
    try:
        return lanes.call(
            catalogue.current(), lanes.INTERACTIVE, lanes.on_worker("evaluate"), *args, time_limit=worker.call_seconds()
        )
    except worker.WorkerFailure as error:
        raise UserOpError(f"{result.spec.key}: {error.how}") from None


def sweep_and_points(
    op: str,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    sweep_range: sweeps.SweepRange | None = None,
    time_limit: float | None = None,
) -> tuple[sweeps.Sweep, Any]:
    """:func:`sweep` and its special points (:func:`explorer.explore.points.special_points`); for a loaded
    op both come from one worker call. The range is ``sweep_range`` or the separate arguments."""
    spec = catalogue.get(op)
    if not catalogue.is_loaded(spec.key) or spec.user_function is None:
        from explorer.explore.points import special_points

        span = sweeps.sweep_range_of(lo, hi, n, upstream, dtype, sweep_range)
        result = sweeps.sweep(spec, params=params, sweep_range=span)
        return result, special_points(result)
    # invalid inputs are ValueErrors as for any op, raised here: in the worker every failure is the user's code
    resolved = spec.resolve(params)
    span = sweeps.sweep_range_of(lo, hi, n, upstream, dtype, sweep_range)
    remembered = (spec.key, tuple(sorted(resolved.items())), span)
    if remembered in _FAILURES:
        raise _FAILURES[remembered]
    limit = worker.call_seconds() if time_limit is None else time_limit
    try:
        frame, points, graph = lanes.call(
            catalogue.current(), lanes.INTERACTIVE, lanes.on_worker("sweep"), spec.key, dict(resolved), span,
            time_limit=limit,
        )  # fmt: skip
    except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
        failure = lanes.failure(spec.key, error, "sweep")
        _FAILURES.remember(remembered, failure)
        raise failure from None
    if graph is not None:
        note_graph_failure(spec.key, graph)
    result = sweeps.Sweep(
        spec, MappingProxyType(dict(resolved)), span.lo, span.hi, span.n, span.dtype, span.upstream, frame,
        reevaluate=evaluate_in_worker,
    )  # fmt: skip
    return result, points


def sweep(
    op: str,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    sweep_range: sweeps.SweepRange | None = None,
    time_limit: float | None = None,
) -> sweeps.Sweep:
    """:func:`explorer.explore.sweeps.sweep` of a built-in or loaded op; a loaded op in its worker under the
    guards of this module's docstring (UserOpError for its failures, ValueError for invalid inputs as for any op)."""
    spec = catalogue.get(op)
    if not catalogue.is_loaded(spec.key) or spec.user_function is None:
        span = sweeps.sweep_range_of(lo, hi, n, upstream, dtype, sweep_range)
        return sweeps.sweep(spec, params=params, sweep_range=span)
    return sweep_and_points(
        op, lo, hi, n, params, upstream, dtype, sweep_range=sweep_range, time_limit=time_limit
    )[0]


def problem(key: str, params: Mapping[str, float] | None = None) -> str | None:
    """Why loaded op ``key`` cannot be trained at ``params`` (its forward or backward raises, hangs, ends its
    worker, is NaN everywhere or has the wrong shape or dtype on the probe of
    :func:`explorer.loaded.worker_side.probe`, float32 on [-3, 3]), or None (also for a built-in).
    Remembered per (op, parameters): the Train page asks on every rerun."""
    spec = catalogue.get(key)
    if not catalogue.is_loaded(spec.key) or spec.user_function is None:
        return None
    resolved = spec.resolve(params)
    remembered = (spec.key, tuple(sorted(resolved.items())))
    here = catalogue.current()
    lanes.worker_for(here, lanes.TRAINING)  # started now (non-blocking): warm by the time the page asks it to train
    if remembered not in _USABLE:
        try:
            lanes.call(
                here, lanes.INTERACTIVE, lanes.on_worker("problem"), spec.key, dict(resolved), time_limit=worker.call_seconds()
            )
            found = None
        except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
            found = str(lanes.failure(spec.key, error, "probe"))
        _USABLE.remember(remembered, found)
    return _USABLE[remembered]
