"""Views of a loaded function that is not one input, one output, elementwise
(:mod:`explorer.explore.signature_views`), seen from the server.

:func:`layout` finds the function's shape once, in the interactive worker (by calling it);
:func:`view_sweep_and_points` sweeps a view op there (one call per view, as
:func:`explorer.loaded.sweeps.sweep`); :func:`untrainable` says why the Train page cannot use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

import explorer.loaded.catalogue as catalogue
import explorer.loaded.lanes as lanes
import ops
from explorer import worker
from explorer.explore import signature_views, sweeps
from explorer.loaded.catalogue import MAX_REMEMBERED
from explorer.loaded.lanes import UserOpError
from explorer.loaded.memory import Remembered
from explorer.loaded.sweeps import note_graph_failure

MAX_VIEW_SPECS = 16  # view ops kept per process (each holds its compiled sweep functions)

_LAYOUTS = Remembered("each loaded op's layout, found in the worker")
_VIEW_SPECS = Remembered("view ops built here", MAX_VIEW_SPECS)
_FAILURES = Remembered("view sweeps that failed, per inputs", MAX_REMEMBERED)


def layout(key: str) -> signature_views.Layout:
    """How loaded op ``key`` looks (:class:`explorer.explore.signature_views.Layout`): its inputs, outputs and
    whether it is elementwise, found once in the worker by calling it; a failure is a Layout whose
    ``failure`` says what went wrong."""
    if key not in _LAYOUTS:
        spec = catalogue.get(key)
        try:
            found = lanes.call(
                catalogue.current(), lanes.INTERACTIVE, lanes.on_worker("layout"), key, time_limit=worker.call_seconds()
            )
        except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
            text = str(lanes.failure(key, error, "probe"))
            found = signature_views.Layout(spec.user_function.inputs, (), 0, False, False, "float32", text)
        _LAYOUTS.remember(key, found)
    return _LAYOUTS[key]


def view_spec(key: str, view: Any) -> ops.OpSpec:
    """The view op of loaded op ``key`` for ``view`` (built without calling the user's code; kept)."""
    item = catalogue.current().ops[key]
    view = signature_views.validate_view(layout(key), view)
    remembered = (key, view)
    if remembered not in _VIEW_SPECS:
        _VIEW_SPECS.remember(remembered, signature_views.view_spec(item.spec, layout(key), view, item.input_ranges))
    _VIEW_SPECS.touch(remembered)
    return _VIEW_SPECS[remembered]


@dataclass(frozen=True, eq=False)
class ViewSweep(sweeps.Sweep):
    """A sweep of a view op computed in the worker, with the view it draws (zooming in goes to the
    worker through :func:`evaluate_view_in_worker`, which the sweep carries)."""

    view: Any = None


def evaluate_view_in_worker(result: ViewSweep, x: np.ndarray, dtype: str) -> dict[str, np.ndarray | bool]:
    """:meth:`explorer.explore.sweeps.Sweep.evaluate` of a view's sweep: in the interactive worker."""
    args = (result.spec.key, result.view, np.asarray(x), dict(result.params), result.upstream, dtype)
    try:
        return lanes.call(
            catalogue.current(), lanes.INTERACTIVE, lanes.on_worker("view_evaluate"), *args,
            time_limit=worker.call_seconds(),
        )  # fmt: skip
    except worker.WorkerFailure as error:
        raise UserOpError(f"{result.spec.key}: {error.how}") from None


def view_sweep_and_points(
    op: str,
    view: Any,
    params: Mapping[str, float] | None = None,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    sweep_range: sweeps.SweepRange | None = None,
) -> tuple[ViewSweep, Any]:
    """The view ``view`` of loaded op ``op`` swept in the worker, and its special points. ``params`` holds the
    function's own parameters and the slider inputs' values; ValueError for invalid inputs, UserOpError for
    the user's failures (remembered per inputs, as for :func:`explorer.loaded.sweeps.sweep`)."""
    found = layout(op)
    if found.failure is not None:
        raise UserOpError(found.failure)
    view = signature_views.validate_view(found, view)
    spec = view_spec(op, view)
    resolved = spec.resolve(params)
    span = sweeps.sweep_range_of(lo, hi, n, upstream, dtype, sweep_range)
    remembered = (op, view, tuple(sorted(resolved.items())), span)
    if remembered in _FAILURES:
        raise _FAILURES[remembered]
    try:
        frame, points, graph = lanes.call(
            catalogue.current(), lanes.INTERACTIVE, lanes.on_worker("view_sweep"),
            op, view, dict(resolved), span, time_limit=worker.call_seconds(),
        )  # fmt: skip
    except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
        failure = lanes.failure(op, error, "sweep")
        _FAILURES.remember(remembered, failure)
        raise failure from None
    if graph is not None:
        note_graph_failure(op, graph)
    result = ViewSweep(
        spec, MappingProxyType(dict(resolved)), span.lo, span.hi, span.n, span.dtype, span.upstream, frame,
        evaluate_view_in_worker, view,
    )  # fmt: skip
    return result, points


def untrainable(key: str) -> str | None:
    """Why the trainer cannot put loaded op ``key`` in its model (it applies one elementwise op of one tensor
    input to a Dense layer's output), or None. Several inputs are read from the signature; outputs, reductions
    and variables from :func:`layout` (a worker call, once per op)."""
    item = catalogue.current().ops.get(key)
    if item is None:
        return None
    inputs = item.spec.user_function.inputs
    if len(inputs) > 1:
        return f"takes {len(inputs)} tensor inputs ({', '.join(inputs)}); the model feeds one"
    found = layout(key)
    if found.failure is not None:
        return found.failure
    if found.outputs > 1:
        return f"has {found.outputs} outputs; the model needs one"
    if not found.elementwise:
        return "is not elementwise (a reduction or another shape); the model applies the op element by element"
    if found.reads_variables:
        return "reads a tf.Variable; the model trains its own weights only"
    return None
