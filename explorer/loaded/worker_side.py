"""What runs in a worker process of the loaded ops (:mod:`explorer.loaded.lanes`), never in the server.

Each public function here is a body a lane sends by name (:func:`explorer.loaded.lanes.on_worker`): the
server's side (:mod:`~explorer.loaded.sweeps`, :mod:`~explorer.loaded.views`,
:mod:`~explorer.loaded.background`, :mod:`~explorer.loaded.training`) validates the inputs, remembers
failures and turns how a call ended into a :class:`~explorer.loaded.lanes.UserOpError`; the bodies here call
the operator's code and return plain values (arrays and frames cross the boundary once per call).
What a worker remembers (graph failures, layouts, view ops, training sessions) is kept here, in that
worker, and dies with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

import explorer.loaded.catalogue as catalogue
import ops
from explorer.explore import signature_views, sweeps
from explorer.loaded.lanes import UserOpError, error_text
from explorer.loaded.memory import Remembered

PROBE_POINTS = 7
MAX_VIEW_SPECS = 16  # view ops kept per process (each holds its compiled sweep functions)
MAX_SESSIONS = 12  # Train-page sessions the training worker keeps: the least recently used is dropped (a page
# discards its session without telling the worker; one dropped but asked again is rebuilt, see WorkerSession._ask)


def start(targets: tuple[str, ...], cwd: str) -> None:
    """At the worker's start: import TensorFlow and load the operator's modules (once)."""
    from explorer import cpu
    from explorer.explore import points  # noqa: F401 - imported now, not during the first sweep

    cpu.one_thread_per_op()  # as in the server: each worker's op on one core
    catalogue.keep(catalogue.load(",".join(targets), cwd))


# -- probes and sweeps ------------------------------------------------------------------------------------------
_GRAPH_FAILURES = Remembered("why each op swept eagerly in this worker failed inside tf.function")


def probe(spec: ops.OpSpec, params: Mapping[str, float], lo: float, hi: float, dtype: str, upstream: float) -> None:
    """Call the user's own function eagerly on :data:`PROBE_POINTS` points of [lo, hi] the way its signature
    asks; UserOpError if forward or backward raises, or if output or gradient has the wrong shape or
    dtype or is NaN on every point. Half precision is probed in float32, the dtype ops compute in."""
    user = spec.user_function
    compute = ops.compute_dtype(dtype)
    x = tf.constant(np.linspace(lo, hi, PROBE_POINTS), compute)
    name = spec.key
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = user.call(x, params)
    except Exception as error:  # noqa: BLE001 - the user's forward
        raise UserOpError(f"{name}'s forward raised {error_text(error)}") from None
    try:
        grad = tape.gradient(y, x, output_gradients=tf.fill(tf.shape(y), tf.cast(upstream, y.dtype)))
    except Exception as error:  # noqa: BLE001 - the user's backward
        raise UserOpError(f"{name}'s backward raised {error_text(error)}") from None
    for what, value in (("output", y), ("gradient", grad)):
        if value is None:
            continue
        if tuple(value.shape) != tuple(x.shape):
            raise UserOpError(
                f"{name}'s {what} has shape {tuple(value.shape)} for x of shape {tuple(x.shape)}: an op must keep "
                f"x's shape (a backward that reduces, e.g. tf.reduce_sum(dy), returns one number for the batch)"
            )
        if value.dtype != x.dtype:
            raise UserOpError(
                f"{name}'s {what} has dtype {value.dtype.name} for x of dtype {x.dtype.name}: an op must keep x's "
                f"dtype (cast inside the backward with tf.cast(..., x.dtype))"
            )
        if np.all(np.isnan(value.numpy())):
            raise UserOpError(f"{name}'s {what} is NaN on every one of {PROBE_POINTS} points of [{lo:g}, {hi:g}]")


def problem(key: str, params: dict) -> None:
    """The Train page's probe: float32 on [-3, 3], upstream 1."""
    probe(catalogue.get(key), params, -3.0, 3.0, "float32", 1.0)


def evaluate(key: str, x: np.ndarray, params: dict, upstream: float, dtype: str) -> dict:
    return sweeps.evaluate(catalogue.get(key), x, params, upstream, dtype)


def sweep(key: str, params: dict, span: sweeps.SweepRange) -> tuple:
    """Probe, sweep (eagerly if the graph fails) and find the special points of loaded op ``key``; returns
    (frame, points table, graph failure or None). UserOpError for the user's failures."""
    from explorer.explore.points import special_points

    spec = catalogue.get(key)
    probe(spec, params, span.lo, span.hi, span.dtype, span.upstream)
    graph = None
    try:
        result = sweeps.sweep(spec, params=params, sweep_range=span)
    except Exception as error:  # noqa: BLE001 - fails inside tf.function: show it eagerly
        if sweeps.is_eager(spec):
            raise
        graph = error_text(error)
        sweeps.run_eagerly(spec)
        result = sweeps.sweep(spec, params=params, sweep_range=span)
    if graph is None and sweeps.is_eager(spec):
        graph = _GRAPH_FAILURES.get(key)
    if graph is not None:
        _GRAPH_FAILURES.remember(key, graph)
    return result.frame, special_points(result), graph


# -- views of a function of any signature ---------------------------------------------------------------------
_LAYOUTS = Remembered("each loaded op's layout, found in this worker")
_VIEW_SPECS = Remembered("view ops built in this worker", MAX_VIEW_SPECS)


def layout(key: str) -> signature_views.Layout:
    """:func:`explorer.explore.signature_views.find_layout` of loaded op ``key`` (calls it; kept)."""
    if key not in _LAYOUTS:
        _LAYOUTS.remember(key, signature_views.find_layout(catalogue.get(key)))
    return _LAYOUTS[key]


def _view_spec(key: str, view: Any) -> ops.OpSpec:
    item = catalogue.current().ops[key]
    found = layout(key)
    view = signature_views.validate_view(found, view)
    if (key, view) not in _VIEW_SPECS:
        _VIEW_SPECS.remember((key, view), signature_views.view_spec(item.spec, found, view, item.input_ranges))
    _VIEW_SPECS.touch((key, view))
    return _VIEW_SPECS[(key, view)]


def view_evaluate(key: str, view: Any, x: np.ndarray, params: dict, upstream: float, dtype: str) -> dict:
    return sweeps.evaluate(_view_spec(key, view), x, params, upstream, dtype)


def view_sweep(key: str, view: Any, params: dict, span: sweeps.SweepRange) -> tuple:
    """Sweep the view op (eagerly if it fails inside tf.function) and find its special points."""
    from explorer.explore.points import special_points

    spec = _view_spec(key, view)
    graph = None
    try:
        result = sweeps.sweep(spec, params=params, sweep_range=span)
    except Exception as error:  # noqa: BLE001 - fails inside tf.function: show it eagerly
        if sweeps.is_eager(spec):
            raise UserOpError(_view_failure(key, error)) from None
        graph = error_text(error)
        sweeps.run_eagerly(spec)
        try:
            result = sweeps.sweep(spec, params=params, sweep_range=span)
        except Exception as eager_error:  # noqa: BLE001 - the user's code fails eagerly too
            raise UserOpError(_view_failure(key, eager_error)) from None
    return result.frame, special_points(result), graph


def _view_failure(key: str, error: BaseException) -> str:
    found = layout(key)
    where = ", ".join(f"{name} {tuple(shape) or 'scalar'}" for name, shape in zip(found.inputs, found.shapes, strict=False))
    return f"{key} raised {error_text(error)} (inputs {where})"


# -- the background lane --------------------------------------------------------------------------------------
def checks(key: str, params: dict, time_limit: float) -> tuple:
    """The checker's results (:func:`explorer.checker.plan.check_function`) for loaded op ``key``."""
    from explorer.checker import plan  # imported at the background worker's start (lanes.checker_warm_up)

    return tuple(plan.check_function(catalogue.get(key), time_limit=time_limit, **params))


def layer_op_key(layer_key: str) -> str | None:
    """The key of the op of the layer's own module whose output and input gradient layer ``layer_key``
    reproduces on 32 inputs, or None."""
    item = catalogue.current().layers[layer_key]
    candidates = {k: op.spec for k, op in catalogue.current().ops.items() if op.module == item.module}
    rng = np.random.default_rng(2)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = item.layer_class()(x)
        grad = tape.gradient(y, x)
    except Exception:  # noqa: BLE001 - a layer that cannot run is reported by the trainer, not here
        return None
    for key, spec in candidates.items():
        try:
            with tf.GradientTape() as tape:
                tape.watch(x)
                op_y = spec.apply(x)
            op_grad = tape.gradient(op_y, x)
        except Exception:  # noqa: BLE001 - not the function this layer calls
            continue
        if op_y.shape == y.shape and np.allclose(op_y.numpy(), y.numpy(), rtol=1e-4, atol=1e-6):
            if grad is not None and op_grad is not None and np.allclose(op_grad.numpy(), grad.numpy(), rtol=1e-4, atol=1e-6):
                return key
    return None


# -- the training lane ----------------------------------------------------------------------------------------
# One process for every Train-page session with a loaded op or layer: a call is one tick's budget, so sessions
# take turns and never hold up the sweeps of the interactive lane. Each body returns the session's state.
_SESSIONS = Remembered("Train-page sessions training in this worker", MAX_SESSIONS)


def _run(description: tuple) -> Any:
    """A trainer Run from :func:`explorer.loaded.training.describe`'s description."""
    from explorer.train import trainer as train

    kind, what, extra, gradient, learn = description
    if kind == "layer":
        op = None if extra is None else catalogue.get(extra)
        return train.Run(op, None, gradient, layer=catalogue.current().layers[what].layer_class)
    if kind == "relu":
        return train.Run(None, None, gradient)
    return train.Run(catalogue.get(what) if kind == "op" else what, extra, gradient, learn=learn)


def _state(session: Any) -> tuple:
    """``(epoch, finished, [(status, history, diverged epoch, seconds, steps/s, error) per run])``."""
    epoch, results = session.snapshot()
    rows = [(r.status, r.history, r.diverged_epoch, r.seconds, r.steps_per_second, r.error) for r in results]
    return epoch, session.finished, rows


def _session(session_id: str) -> Any:
    session = _SESSIONS.get(session_id)
    if session is None:
        raise LookupError(
            "its models are no longer in the training worker (the worker was replaced after a failure, or more "
            f"than {MAX_SESSIONS} sessions trained since); press Start to train again"
        )
    _SESSIONS.touch(session_id)
    return session


def new_session(session_id: str, state: Any, descriptions: list) -> tuple:
    from explorer.train import trainer as train

    session = train.Session(state, runs=[_run(d) for d in descriptions])
    _SESSIONS.remember(session_id, session)
    return _state(session)


def train_to(session_id: str, target: int, seconds: float | None) -> tuple:
    session = _session(session_id)
    session.train_to(target, seconds=seconds)
    return _state(session)


def step(session_id: str, epochs: int) -> tuple:
    session = _session(session_id)
    session.step(epochs)
    return _state(session)


def reset(session_id: str) -> tuple:
    session = _session(session_id)
    session.reset()
    return _state(session)


def predictions(session_id: str, resolution: int) -> list:
    from explorer.train import trainer as train

    session = _session(session_id)
    return [train.predict_grid(r.model, session.dataset, resolution=resolution) for r in session.results()]
