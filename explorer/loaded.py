"""Your own ops in the app: the functions and layers the operator loaded with ``GRADIENT_EXPLORER_OPS``.

The environment variable (set by ``gradient-explorer run --ops`` and ``make run OPS=``, see
:mod:`explorer.serve`) names comma-separated targets, resolved against the working directory and
discovered exactly as ``python -m explorer verify TARGET`` discovers them (:mod:`explorer.checker.discover`).
Loading happens once per server process (:func:`current`); no page, URL or typed text ever loads or
runs code: a URL names a loaded op by its key only. Nothing here imports streamlit.

Conventions:

* An op's key is its function name; where that clashes with a built-in key or with a function of
  another loaded module, every clashing one is ``module.function`` (a URL needs one stable key).
* The pages look every op up with :func:`get` / :func:`names` (built-ins first, then loaded ops), never
  by putting loaded ops into ``ops``' registry: the built-in registry stays the 26 ops the tests and
  the checker enumerate, and a test that loads examples cannot leak them into another test.
  :func:`reset` forgets the loaded ops (tests change the environment and call it).
* User code is not trusted to behave, and never runs in this (the server's) process: the server imports
  the operator's modules to read their names, signatures and declarations, and every call into them
  runs in a worker process (:mod:`explorer.worker`) that imports them once and stays warm. Three workers:
  ``interactive`` for sweeps and probes (short calls, all sessions share it), ``background`` for the
  checker's results and finding the op a layer calls (seconds each), so a check never delays a sweep, and
  ``training`` for Train-page sessions with a loaded op or layer (:class:`WorkerSession`, one tick's
  budget per call). :func:`start_workers` starts the first with the server; the others start when first needed.
* :func:`sweep` probes a loaded op's forward and backward on a few points first (exception, NaN
  everywhere, wrong shape or dtype: a :class:`UserOpError` naming it, in place of the figure), sweeps
  it and finds its special points, all in one worker call (the arrays cross once per sweep); when it
  fails inside ``tf.function`` (NumPy calls) it is swept eagerly and the graph failure is kept for the
  page (:func:`graph_failure`). A call that does not return within its time limit
  (:func:`explorer.worker.call_seconds`, 20 s), or that ends its worker (``os._exit``, a segfault,
  ``SystemExit``), is a UserOpError saying so; the worker is replaced. Failures are remembered per
  inputs, so a hung op costs its time limit once, not on every rerun.
* A function that is not one input, one output, elementwise is drawn through a view
  (:mod:`explorer.explore.signature_views`): :func:`layout` finds its shape once in the worker,
  :func:`view_sweep_and_points` sweeps its view op there (one call per view, as :func:`sweep`), and
  :func:`untrainable` says why the Train page cannot use it.
* The checker's results (:func:`checks`) run once per (op, parameters) in the background worker:
  they take seconds (a ``Model.fit`` and a SavedModel export), and the figure must not wait.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

import ops
from explorer import worker
from explorer.checker import discover
from explorer.explore import sweeps
from explorer.serve import OPS_ENV, user_code_warm

SWEEP_TIME_LIMIT = worker.process.DEFAULT_CALL_SECONDS  # default of GRADIENT_EXPLORER_CALL_SECONDS (worker.call_seconds)
CHECK_TIME_LIMIT = 30.0  # seconds per check in the app (the command line allows 120)
PROBE_POINTS = 7
MAX_REMEMBERED = 64  # failures and check results kept (the oldest are forgotten first)


class UserOpError(ValueError):
    """A loaded op failed at these inputs: raised, timed out, NaN everywhere, wrong shape or dtype.

    A ValueError, so every view that already reports bad inputs ("Cannot compare: ...") reports it too.
    """


@dataclass(frozen=True)
class LoadedOp:
    """One loaded ``@tf.custom_gradient`` function: its key in the app, where it came from, its op."""

    key: str
    name: str
    module: str
    spec: ops.OpSpec
    input_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # declared slider ranges


@dataclass(frozen=True)
class LoadedLayer:
    """One loaded ``keras.layers.Layer`` subclass (built with no arguments); :attr:`op_key` is the key of
    the loaded op it calls, found in the background worker at first use."""

    key: str
    name: str
    module: str
    layer_class: type

    @property
    def op_key(self) -> str | None:
        """The loaded op whose output and input gradient the layer reproduces, or None if none matched
        (or the layer could not run: the trainer reports that)."""
        return layer_op_key(self.key)


@dataclass(frozen=True)
class Loaded:
    """What ``GRADIENT_EXPLORER_OPS`` gave: ops and layers by key, and one :class:`discover.LoadError`
    per target (or function) that gave nothing usable."""

    targets: tuple[str, ...] = ()
    ops: Mapping[str, LoadedOp] = field(default_factory=dict)
    layers: Mapping[str, LoadedLayer] = field(default_factory=dict)
    errors: tuple[discover.LoadError, ...] = ()
    cwd: str = ""  # the directory the targets were resolved against (the worker loads them from there too)

    def modules(self) -> dict[str, list[str]]:
        """Op keys grouped by module, in load order (the picker's "Yours · module" groups)."""
        grouped: dict[str, list[str]] = {}
        for item in self.ops.values():
            grouped.setdefault(item.module, []).append(item.key)
        return grouped


def parse_targets(value: str | None) -> tuple[str, ...]:
    """``"a.py, pkg.mod,,"`` -> ``("a.py", "pkg.mod")``: comma-separated, blanks dropped."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _discover(target: str, cwd: Path) -> discover.Discovered:
    """:func:`discover.discover`, a relative path taken from ``cwd`` and ``cwd`` importable (module names)."""
    path = Path(target)
    if not path.is_absolute() and (cwd / path).exists():
        target_text = str(cwd / path)
    else:
        target_text = target
    sys.path.insert(0, str(cwd))
    try:
        found = discover.discover(target_text)
    finally:
        sys.path.remove(str(cwd))
    # report the target as the operator wrote it
    return discover.Discovered(
        found.functions,
        found.layers,
        [discover.LoadError(target if e.target == target_text else e.target, e.error, e.message) for e in found.errors],
    )


DECLARATIONS = "GRADIENT_EXPLORER"  # module-level dict: function name -> from_function keywords (+ "name")
DECLARED_KEYWORDS = ("forward", "points", "ranges", "title", "justification", "input_shapes")  # + "input_ranges"


def declarations(item: discover.Found) -> dict[str, Any]:
    """What the function's module declares for it in ``GRADIENT_EXPLORER = {"fn": {...}}`` (the editor's
    export writes one): ``forward``, ``points``, ``ranges``, ``title``, ``justification`` as
    :func:`ops.from_function` takes them, and ``name``, the key to show it under. Empty if none; a value
    that is not a dict is ignored, a bad declaration inside one is a load error from ``from_function``."""
    module = discover.module_of(item.obj)
    table = getattr(module, DECLARATIONS, None)
    declared = table.get(item.name) if isinstance(table, dict) else None
    return dict(declared) if isinstance(declared, dict) else {}


def _keys(modules: list[str], shown: list[str]) -> list[str]:
    """Names as keys; ``module.name`` for every name that clashes (with a built-in or another function)."""
    builtin = set(ops.names())
    return [
        f"{module}.{name}" if name in builtin or shown.count(name) > 1 else name
        for module, name in zip(modules, shown, strict=True)
    ]


def _op_the_layer_calls(layer_class: type, candidates: Mapping[str, ops.OpSpec]) -> str | None:
    """The key of the candidate whose output and input gradient the layer reproduces on 32 inputs."""
    rng = np.random.default_rng(2)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer_class()(x)
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


def load(value: str | None, cwd: str | Path | None = None) -> Loaded:
    """The ops, layers and load errors of the targets in ``value`` (the environment variable's text)."""
    cwd = Path(cwd or os.getcwd()).resolve()
    targets = parse_targets(value)
    found = discover.Discovered()
    for target in targets:
        found.extend(_discover(target, cwd))
    errors = list(found.errors)
    loaded_ops: dict[str, LoadedOp] = {}
    declared = [declarations(item) for item in found.functions]
    shown = [str(d.get("name") or item.name) for d, item in zip(declared, found.functions, strict=True)]
    keys = _keys([item.module for item in found.functions], shown)
    for item, key, name, extra in zip(found.functions, keys, shown, declared, strict=True):
        try:
            spec = ops.from_function(
                item.obj, key=key, **{k: extra[k] for k in DECLARED_KEYWORDS if k in extra}
            )
        except Exception as error:  # noqa: BLE001 - TypeError/ValueError for what cannot be an op, or a bad declaration
            errors.append(discover.LoadError(f"{item.module}.{item.name}", type(error).__name__, str(error)))
            continue
        try:
            ranges = _input_ranges(extra.get("input_ranges"), spec)
        except ValueError as error:
            errors.append(discover.LoadError(f"{item.module}.{item.name}", "ValueError", str(error)))
            continue
        loaded_ops[key] = LoadedOp(key, name, item.module, spec, ranges)
    layers: dict[str, LoadedLayer] = {}
    for item in found.layers:  # which op a layer calls is found by calling it: in a worker, at first use
        key = item.name if item.name not in loaded_ops and item.name not in layers else f"{item.module}.{item.name}"
        layers[key] = LoadedLayer(key, item.name, item.module, item.obj)
    return Loaded(targets, loaded_ops, layers, tuple(errors), str(cwd))


def _input_ranges(declared: Any, spec: ops.OpSpec) -> dict[str, tuple[float, float]]:
    """``input_ranges = {"lam": (0, 2)}`` in the module's declaration: the slider range of a scalar tensor
    input (without one: :data:`explorer.explore.signature_views.DEFAULT_INPUT_RANGE`)."""
    if declared is None:
        return {}
    inputs = spec.user_function.inputs
    if not isinstance(declared, dict):
        raise ValueError(f"{spec.key}: input_ranges must be a dict input -> (low, high), e.g. {{'{inputs[-1]}': (0, 2)}}")
    ranges = {}
    for name, value in declared.items():
        ok = name in inputs and isinstance(value, (list, tuple)) and len(value) == 2
        ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in value)
        if not ok or not value[0] < value[1]:
            raise ValueError(
                f"{spec.key}: input_ranges[{name!r}] must be (low, high) with low < high for one of the inputs "
                f"{', '.join(inputs)}; got {value!r}"
            )
        ranges[name] = (float(value[0]), float(value[1]))
    return ranges


_LOCK = threading.Lock()
_CURRENT: dict[str, Loaded] = {}


def current() -> Loaded:
    """The ops of this server process: loaded from ``GRADIENT_EXPLORER_OPS`` at the first call, then kept."""
    with _LOCK:
        if "loaded" not in _CURRENT:
            _CURRENT["loaded"] = load(os.environ.get(OPS_ENV))
        return _CURRENT["loaded"]


def reset() -> None:
    """Forget the loaded ops (and what was remembered about them) and stop their workers; the next
    :func:`current` loads again."""
    with _LOCK:
        _CURRENT.clear()
        _FAILURES.clear()
        _GRAPH_FAILURES.clear()
        _USABLE.clear()
        _LAYER_OPS.clear()
        _LAYOUTS.clear()
        _VIEW_SPECS.clear()
        for future in _CHECKS.values():  # checks not started yet are dropped, not run for ops now forgotten
            future.cancel()
        _CHECKS.clear()
    stop_workers()


def names() -> list[str]:
    """Every op key the pages accept: the built-ins, then the loaded ops."""
    return ops.names() + list(current().ops)


def get(key: str | ops.OpSpec) -> ops.OpSpec:
    """The built-in or loaded op ``key`` (an OpSpec passes through); KeyError names the valid keys."""
    if isinstance(key, ops.OpSpec):
        return key
    found = current().ops.get(key) if isinstance(key, str) else None
    if found is not None:
        return found.spec
    try:
        return ops.get(key)
    except KeyError:
        raise KeyError(f"unknown op {key!r}; valid ops: {', '.join(names())}") from None


def is_loaded(key: str) -> bool:
    return isinstance(key, str) and key in current().ops


def module_of(key: str) -> str | None:
    """The module a loaded op comes from (None for a built-in)."""
    item = current().ops.get(key)
    return None if item is None else item.module



# -- the workers ------------------------------------------------------------------------------------------
def _worker_start(targets: tuple[str, ...], cwd: str) -> None:
    """In a worker process, at its start: import TensorFlow and load the operator's modules (once)."""
    _IN_WORKER[0] = True
    from explorer import cpu
    from explorer.explore import points  # noqa: F401 - imported now, not during the first sweep

    cpu.one_thread_per_op()  # as in the server: each worker's op on one core
    with _LOCK:
        _CURRENT["loaded"] = load(",".join(targets), cwd)


_IN_WORKER = [False]
LANES = ("interactive", "background", "training")
TRAINING = 2  # the lane of training sessions with a loaded op or layer (see WorkerSession)


def _worker(lane: int) -> worker.Worker:
    """The interactive (0), background (1) or training (2) worker of the loaded ops, started if need be
    (the background one at its first call, the training one at the first Train-page probe: neither is
    needed before the first figure)."""
    here = current()
    return worker.shared(LANES[lane], user_code_warm(here.targets, here.cwd))


def start_workers() -> bool:
    """Start the sweeps' worker now if the operator loaded any ops (the app calls
    :func:`explorer.serve.start_user_code_worker` earlier still, before its own imports). True if any."""
    if not current().ops and not current().layers:
        return False
    _worker(0)
    return True


def stop_workers() -> None:
    for lane in LANES:
        worker.close_shared(lane)


def worker_pids() -> dict[str, int]:
    """The process id of each running worker (for the tests and the runbook's ``ps``)."""
    pids = {lane: worker.running_pid(lane) for lane in LANES}
    return {lane: pid for lane, pid in pids.items() if pid is not None}


def _call(lane: int, function: Callable[..., Any], *args: Any, time_limit: float) -> Any:
    """``function(*args)`` in the interactive (0), background (1) or training (2) worker; in a worker, right here."""
    if _IN_WORKER[0]:
        return function(*args)
    return _worker(lane).call(function, *args, time_limit=time_limit)


# -- running user code safely ---------------------------------------------------------------------------
def _text(error: BaseException) -> str:
    """``Type: message`` on one line, the last line of a traced error, at most 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "in user code" in lines[0] else " ".join(lines)
    text = text if len(text) <= 300 else text[:297] + "..."
    if isinstance(error, worker.RemoteError):  # an exception that did not pickle: its text names its type
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def probe(spec: ops.OpSpec, params: Mapping[str, float], lo: float, hi: float, dtype: str, upstream: float) -> None:
    """Call the user's own function eagerly on :data:`PROBE_POINTS` points of [lo, hi] the way its signature
    asks; UserOpError if forward or backward raises, or if output or gradient has the wrong shape or
    dtype or is NaN on every point. Half precision is probed in float32, the dtype ops compute in.
    Runs where it is called: the worker calls it (:func:`sweep`, :func:`problem`)."""
    user = spec.user_function
    compute = ops.compute_dtype(dtype)
    x = tf.constant(np.linspace(lo, hi, PROBE_POINTS), compute)
    name = spec.key
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = user.call(x, params)
    except Exception as error:  # noqa: BLE001 - the user's forward
        raise UserOpError(f"{name}'s forward raised {_text(error)}") from None
    try:
        grad = tape.gradient(y, x, output_gradients=tf.fill(tf.shape(y), tf.cast(upstream, y.dtype)))
    except Exception as error:  # noqa: BLE001 - the user's backward
        raise UserOpError(f"{name}'s backward raised {_text(error)}") from None
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


_FAILURES: OrderedDict[tuple, UserOpError] = OrderedDict()
_GRAPH_FAILURES: dict[str, str] = {}


def _remember(store: OrderedDict, key: tuple, value: Any) -> None:
    store[key] = value
    while len(store) > MAX_REMEMBERED:
        store.popitem(last=False)


NUMPY_HINT = "NumPy (.numpy(), np.*) inside the function or its backward works only eagerly: use TensorFlow ops"


def graph_failure(key: str) -> str | None:
    """Why the loaded op ``key`` could not run inside ``tf.function`` (it is then swept eagerly), or None."""
    failure = _GRAPH_FAILURES.get(key)
    if failure is not None and "numpy" in failure.lower():
        return f"{failure}. Fix: {NUMPY_HINT}"
    return failure


def keyword_note(key: str) -> str | None:
    """For a loaded op with keyword parameters: why it runs here although ``tf.function`` rejects it."""
    spec = get(key)
    user = spec.user_function
    if user is None or not user.keyword:
        return None
    return (
        f"keyword parameter(s) {', '.join(user.keyword)}: TensorFlow rejects keyword arguments to a "
        "@tf.custom_gradient function inside tf.function and Model.fit. The views call your undecorated "
        "function positionally, so the curves are yours; the graph check below calls it as declared"
    )


@dataclass(frozen=True, eq=False)
class WorkerSweep(sweeps.Sweep):
    """A sweep of a loaded op computed in a worker: the same record, and :meth:`evaluate` (zooming in on
    a point) goes to the worker too, so the server never calls the op itself."""

    def evaluate(self, x: np.ndarray, dtype: str | None = None) -> dict[str, np.ndarray | bool]:
        args = (self.spec.key, np.asarray(x), dict(self.params), self.upstream, dtype or self.dtype)
        try:
            return _call(0, _evaluate_here, *args, time_limit=worker.call_seconds())
        except worker.WorkerFailure as error:
            raise UserOpError(f"{self.spec.key}: {error.how}") from None

    def with_frame(self, frame: Any) -> WorkerSweep:
        return WorkerSweep(self.spec, self.params, self.lo, self.hi, self.n, self.dtype, self.upstream, frame)


def _evaluate_here(key: str, x: np.ndarray, params: dict, upstream: float, dtype: str) -> dict:
    return sweeps.evaluate(get(key), x, params, upstream, dtype)


def _sweep_here(key: str, params: dict, lo: float, hi: float, n: int, dtype: str, upstream: float) -> tuple:
    """In the worker: probe, sweep (eagerly if the graph fails) and find the special points of loaded op
    ``key``; returns (frame, points table, graph failure or None). UserOpError for the user's failures."""
    from explorer.explore.points import special_points

    spec = get(key)
    probe(spec, params, lo, hi, dtype, upstream)
    graph = None
    try:
        result = sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=params, upstream=upstream, dtype=dtype)
    except Exception as error:  # noqa: BLE001 - fails inside tf.function: show it eagerly
        if sweeps.is_eager(spec):
            raise
        graph = _text(error)
        sweeps.run_eagerly(spec)
        result = sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=params, upstream=upstream, dtype=dtype)
    if graph is None and sweeps.is_eager(spec):
        graph = _GRAPH_FAILURES.get(key)
    if graph is not None:
        _GRAPH_FAILURES[key] = graph
    return result.frame, special_points(result), graph


def _failure_text(key: str, error: BaseException, doing: str) -> UserOpError:
    """The UserOpError for whatever ``error`` a worker call on loaded op ``key`` ended with."""
    if isinstance(error, UserOpError):
        return error
    if isinstance(error, worker.WorkerFailure):
        return UserOpError(f"{key} {error.how}; the {doing} was abandoned")
    return UserOpError(f"{key} raised {_text(error)} while being {'swept' if doing == 'sweep' else 'probed'}")


def sweep_and_points(
    op: str,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    time_limit: float | None = None,
) -> tuple[sweeps.Sweep, Any]:
    """:func:`sweep` and its special points (:func:`explorer.explore.points.special_points`); for a loaded
    op both come from one worker call."""
    spec = get(op)
    if not is_loaded(spec.key) or spec.user_function is None:
        from explorer.explore.points import special_points

        result = sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=params, upstream=upstream, dtype=dtype)
        return result, special_points(result)
    # invalid inputs are ValueErrors as for any op, raised here: in the worker every failure is the user's code
    resolved = spec.resolve(params)
    dtype = sweeps.validate_dtype(dtype)
    lo, hi, n = sweeps.validate_range(lo, hi, n, dtype)
    upstream = sweeps.validate_upstream(upstream, dtype)
    remembered = (spec.key, tuple(sorted(resolved.items())), lo, hi, n, dtype, upstream)
    if remembered in _FAILURES:
        raise _FAILURES[remembered]
    limit = worker.call_seconds() if time_limit is None else time_limit
    try:
        frame, points, graph = _call(0, _sweep_here, spec.key, dict(resolved), lo, hi, n, dtype, upstream, time_limit=limit)
    except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
        failure = _failure_text(spec.key, error, "sweep")
        _remember(_FAILURES, remembered, failure)
        raise failure from None
    if graph is not None:
        _GRAPH_FAILURES[spec.key] = graph
    from types import MappingProxyType

    return WorkerSweep(spec, MappingProxyType(dict(resolved)), lo, hi, n, dtype, upstream, frame), points


def sweep(
    op: str,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    time_limit: float | None = None,
) -> sweeps.Sweep:
    """:func:`explorer.explore.sweeps.sweep` of a built-in or loaded op; a loaded op in its worker under the
    guards of the module docstring (UserOpError for its failures, ValueError for invalid inputs as for any op)."""
    spec = get(op)
    if not is_loaded(spec.key) or spec.user_function is None:
        return sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=params, upstream=upstream, dtype=dtype)
    return sweep_and_points(op, lo, hi, n, params, upstream, dtype, time_limit=time_limit)[0]


_USABLE: OrderedDict[tuple, str | None] = OrderedDict()


def _problem_here(key: str, params: dict) -> None:
    probe(get(key), params, -3.0, 3.0, "float32", 1.0)


def problem(key: str, params: Mapping[str, float] | None = None) -> str | None:
    """Why loaded op ``key`` cannot be trained at ``params`` (its forward or backward raises, hangs, ends its
    worker, is NaN everywhere or has the wrong shape or dtype on the probe of :func:`probe`, float32 on
    [-3, 3]), or None (also for a built-in). Remembered per (op, parameters): the Train page asks on
    every rerun."""
    spec = get(key)
    if not is_loaded(spec.key) or spec.user_function is None:
        return None
    resolved = spec.resolve(params)
    remembered = (spec.key, tuple(sorted(resolved.items())))
    if not _IN_WORKER[0]:
        _worker(TRAINING)  # started now (non-blocking): warm by the time the page asks it to train
    if remembered not in _USABLE:
        try:
            _call(0, _problem_here, spec.key, dict(resolved), time_limit=worker.call_seconds())
            found = None
        except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
            found = str(_failure_text(spec.key, error, "probe"))
        _remember(_USABLE, remembered, found)
    return _USABLE[remembered]


_LAYER_OPS: dict[str, str | None] = {}


def _layer_op_here(layer_key: str) -> str | None:
    item = current().layers[layer_key]
    siblings = {k: op.spec for k, op in current().ops.items() if op.module == item.module}
    return _op_the_layer_calls(item.layer_class, siblings)


def layer_op_key(layer_key: str) -> str | None:
    """The key of the loaded op loaded layer ``layer_key`` calls (found in the background worker, once)."""
    if layer_key not in _LAYER_OPS:
        try:
            found = _call(1, _layer_op_here, layer_key, time_limit=worker.call_seconds())
        except Exception:  # noqa: BLE001 - a layer that cannot run is reported by the trainer, not here
            found = None
        _LAYER_OPS[layer_key] = found
    return _LAYER_OPS[layer_key]


# -- the checker, in the background ----------------------------------------------------------------------
_EXECUTOR = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="loaded-checks")
_CHECKS: OrderedDict[tuple, concurrent.futures.Future] = OrderedDict()


def _checks_here(key: str, params: dict, time_limit: float) -> tuple:
    from explorer.checker import plan  # keras and the checks load only when a check is asked for

    return tuple(plan.check_function(get(key), time_limit=time_limit, **params))


def _run_checks(key: str, params: dict, time_limit: float) -> tuple:
    """The checks in the background worker; a worker that does not return or ends is one failed row."""
    from explorer.checker.common import Check

    try:
        return _call(1, _checks_here, key, params, time_limit, time_limit=worker.check_seconds())
    except worker.WorkerFailure as error:
        return (Check("worker", False, f"{key}'s checks {error.how}; the worker process was replaced", "fail"),)


def checks(key: str, params: Mapping[str, float], *, time_limit: float = CHECK_TIME_LIMIT) -> concurrent.futures.Future:
    """The checker's results (a tuple of :class:`explorer.checker.common.Check`) for loaded op ``key`` at
    ``params``, as a Future: computed once per (op, parameters) in the background worker (one core, so a
    sweep keeps the other). Asking for other parameters of the same op cancels its requests not yet
    started: a slider dragged through ten values checks the one it stops at."""
    spec = get(key)
    resolved = spec.resolve(params)
    cache_key = (spec.key, tuple(sorted(resolved.items())))
    with _LOCK:
        future = _CHECKS.get(cache_key)
        if future is not None and not future.cancelled():
            _CHECKS.move_to_end(cache_key)
            return future
        for other_key, other in list(_CHECKS.items()):
            if other_key[0] == spec.key and other.cancel():
                del _CHECKS[other_key]
        future = _EXECUTOR.submit(_run_checks, spec.key, dict(resolved), time_limit)
        _remember(_CHECKS, cache_key, future)
        return future


# -- any signature: the views of explorer.explore.signature_views ---------------------------------------
_LAYOUTS: dict[str, Any] = {}
_VIEW_SPECS: OrderedDict[tuple, ops.OpSpec] = OrderedDict()
MAX_VIEW_SPECS = 16  # view ops kept per process (each holds its compiled sweep functions)


def find_layout(spec: ops.OpSpec):
    """:func:`explorer.explore.signature_views.find_layout`. Calls the user's code: in the worker (or a test)."""
    from explorer.explore import signature_views

    return signature_views.find_layout(spec)


def _layout_here(key: str):
    return find_layout(get(key))


def layout(key: str):
    """How loaded op ``key`` looks (:class:`explorer.explore.signature_views.Layout`): its inputs, outputs and
    whether it is elementwise, found once in the worker by calling it; a failure is a Layout whose
    ``failure`` says what went wrong."""
    from explorer.explore import signature_views

    if key not in _LAYOUTS:
        spec = get(key)
        try:
            found = _call(0, _layout_here, key, time_limit=worker.call_seconds())
        except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
            text = str(_failure_text(key, error, "probe"))
            found = signature_views.Layout(spec.user_function.inputs, (), 0, False, False, "float32", text)
        _LAYOUTS[key] = found
    return _LAYOUTS[key]


def view_spec(key: str, view: Any) -> ops.OpSpec:
    """The view op of loaded op ``key`` for ``view`` (built without calling the user's code; kept)."""
    from explorer.explore import signature_views

    item = current().ops[key]
    view = signature_views.validate_view(layout(key), view)
    remembered = (key, view)
    if remembered not in _VIEW_SPECS:
        _remember(_VIEW_SPECS, remembered, signature_views.view_spec(item.spec, layout(key), view, item.input_ranges))
        while len(_VIEW_SPECS) > MAX_VIEW_SPECS:
            _VIEW_SPECS.popitem(last=False)
    _VIEW_SPECS.move_to_end(remembered)
    return _VIEW_SPECS[remembered]


@dataclass(frozen=True, eq=False)
class ViewSweep(sweeps.Sweep):
    """A sweep of a view op computed in the worker; zooming in (:meth:`evaluate`) goes there too."""

    view: Any = None

    def evaluate(self, x: np.ndarray, dtype: str | None = None) -> dict[str, np.ndarray | bool]:
        args = (self.spec.key, self.view, np.asarray(x), dict(self.params), self.upstream, dtype or self.dtype)
        try:
            return _call(0, _view_evaluate_here, *args, time_limit=worker.call_seconds())
        except worker.WorkerFailure as error:
            raise UserOpError(f"{self.spec.key}: {error.how}") from None

    def with_frame(self, frame: Any) -> ViewSweep:
        return ViewSweep(self.spec, self.params, self.lo, self.hi, self.n, self.dtype, self.upstream, frame, self.view)


def _view_evaluate_here(key: str, view: Any, x: np.ndarray, params: dict, upstream: float, dtype: str) -> dict:
    return sweeps.evaluate(view_spec(key, view), x, params, upstream, dtype)


def _view_sweep_here(key: str, view: Any, params: dict, lo: float, hi: float, n: int, dtype: str, upstream: float) -> tuple:
    """In the worker: sweep the view op (eagerly if it fails inside tf.function) and find its special points."""
    from explorer.explore.points import special_points

    spec = view_spec(key, view)
    graph = None
    try:
        result = sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=params, upstream=upstream, dtype=dtype)
    except Exception as error:  # noqa: BLE001 - fails inside tf.function: show it eagerly
        if sweeps.is_eager(spec):
            raise UserOpError(_view_failure(key, error)) from None
        graph = _text(error)
        sweeps.run_eagerly(spec)
        try:
            result = sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=params, upstream=upstream, dtype=dtype)
        except Exception as eager_error:  # noqa: BLE001 - the user's code fails eagerly too
            raise UserOpError(_view_failure(key, eager_error)) from None
    if graph is not None:
        _GRAPH_FAILURES[key] = graph
    return result.frame, special_points(result), graph


def _view_failure(key: str, error: BaseException) -> str:
    found = layout(key)
    where = ", ".join(f"{name} {tuple(shape) or 'scalar'}" for name, shape in zip(found.inputs, found.shapes, strict=False))
    return f"{key} raised {_text(error)} (inputs {where})"


def view_sweep_and_points(
    op: str,
    view: Any,
    params: Mapping[str, float] | None = None,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    upstream: float = 1.0,
    dtype: str = "float32",
) -> tuple[ViewSweep, Any]:
    """The view ``view`` of loaded op ``op`` swept in the worker, and its special points. ``params`` holds the
    function's own parameters and the slider inputs' values; ValueError for invalid inputs, UserOpError for
    the user's failures (remembered per inputs, as for :func:`sweep`)."""
    from types import MappingProxyType

    from explorer.explore import signature_views

    found = layout(op)
    if found.failure is not None:
        raise UserOpError(found.failure)
    view = signature_views.validate_view(found, view)
    spec = view_spec(op, view)
    resolved = spec.resolve(params)
    dtype = sweeps.validate_dtype(dtype)
    lo, hi, n = sweeps.validate_range(lo, hi, n, dtype)
    upstream = sweeps.validate_upstream(upstream, dtype)
    remembered = ("view", op, view, tuple(sorted(resolved.items())), lo, hi, n, dtype, upstream)
    if remembered in _FAILURES:
        raise _FAILURES[remembered]
    try:
        frame, points, graph = _call(
            0, _view_sweep_here, op, view, dict(resolved), lo, hi, n, dtype, upstream, time_limit=worker.call_seconds()
        )
    except Exception as error:  # noqa: BLE001 - the user's code, or how its worker ended
        failure = _failure_text(op, error, "sweep")
        _remember(_FAILURES, remembered, failure)
        raise failure from None
    if graph is not None:
        _GRAPH_FAILURES[op] = graph
    return ViewSweep(spec, MappingProxyType(dict(resolved)), lo, hi, n, dtype, upstream, frame, view), points


def untrainable(key: str) -> str | None:
    """Why the trainer cannot put loaded op ``key`` in its model (it applies one elementwise op of one tensor
    input to a Dense layer's output), or None. Several inputs are read from the signature; outputs, reductions
    and variables from :func:`layout` (a worker call, once per op)."""
    item = current().ops.get(key)
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


# -- training in the worker ------------------------------------------------------------------------------
# A Train-page session with at least one run of a loaded op or layer trains in the training worker (lane
# TRAINING, one process for every such session: a training call is one tick's budget, so sessions take
# turns and never hold up the sweeps of the interactive lane). Its runs share data and initial weights,
# so the whole session goes, built-in runs too. The server keeps a WorkerSession: the same interface the
# page uses of trainer.Session, each method one worker call that returns the session's state.
MAX_WORKER_SESSIONS = 12  # sessions the training worker keeps: the least recently used is dropped (a page
# discards its session without telling the worker; one dropped but asked again is rebuilt, see WorkerSession._ask)
_SESSIONS: OrderedDict[str, Any] = OrderedDict()  # in the training worker: session id -> trainer.Session


def needs_worker(runs: Any) -> bool:
    """True if any of these trainer Runs calls a loaded op or layer (the session then trains in a worker)."""
    return any(run.layer is not None or (run.op is not None and is_loaded(run.spec.key)) for run in runs)


def _describe(run: Any) -> tuple:
    """A trainer Run as the worker rebuilds it: ``(kind, key or spec, params or op key, gradient, learn)``;
    loaded ops and layers go by key (the worker loaded the same modules), an editor op as its spec."""
    if run.layer is not None:
        keys = [key for key, item in current().layers.items() if item.layer_class is run.layer]
        if not keys:
            raise ValueError(f"{run.layer.__name__} is not a layer loaded with GRADIENT_EXPLORER_OPS")
        return ("layer", keys[0], None if run.op is None else run.spec.key, run.gradient, False)
    if run.op is None:
        return ("relu", None, None, run.gradient, False)
    spec = run.spec
    if spec.builtin or is_loaded(spec.key):
        return ("op", spec.key, dict(run.params), run.gradient, run.learn)
    return ("spec", spec, dict(run.params), run.gradient, run.learn)


def _run_here(description: tuple) -> Any:
    from explorer.train import trainer as train

    kind, what, extra, gradient, learn = description
    if kind == "layer":
        return train.Run(None if extra is None else get(extra), None, gradient, layer=current().layers[what].layer_class)
    if kind == "relu":
        return train.Run(None, None, gradient)
    return train.Run(get(what) if kind == "op" else what, extra, gradient, learn=learn)


def _state_here(session: Any) -> tuple:
    """``(epoch, finished, [(status, history, diverged epoch, seconds, steps/s, error) per run])``."""
    epoch, results = session.snapshot()
    rows = [(r.status, r.history, r.diverged_epoch, r.seconds, r.steps_per_second, r.error) for r in results]
    return epoch, session.finished, rows


def _session_here(session_id: str) -> Any:
    session = _SESSIONS.get(session_id)
    if session is None:
        raise LookupError(
            "its models are no longer in the training worker (the worker was replaced after a failure, or more "
            f"than {MAX_WORKER_SESSIONS} sessions trained since); press Start to train again"
        )
    _SESSIONS.move_to_end(session_id)
    return session


def _new_session_here(session_id: str, state: Any, descriptions: list) -> tuple:
    from explorer.train import trainer as train

    session = train.Session(state, runs=[_run_here(d) for d in descriptions])
    _SESSIONS[session_id] = session
    while len(_SESSIONS) > MAX_WORKER_SESSIONS:
        _SESSIONS.popitem(last=False)
    return _state_here(session)


def _train_to_here(session_id: str, target: int, seconds: float | None) -> tuple:
    session = _session_here(session_id)
    session.train_to(target, seconds=seconds)
    return _state_here(session)


def _step_here(session_id: str, epochs: int) -> tuple:
    session = _session_here(session_id)
    session.step(epochs)
    return _state_here(session)


def _reset_here(session_id: str) -> tuple:
    session = _session_here(session_id)
    session.reset()
    return _state_here(session)


def _predictions_here(session_id: str, resolution: int) -> list:
    from explorer.train import trainer as train

    session = _session_here(session_id)
    return [train.predict_grid(r.model, session.dataset, resolution=resolution) for r in session.results()]


class WorkerSession:
    """A trainer Session that lives in the training worker, seen from the server: ``train_to``, ``step``,
    ``reset``, ``snapshot`` (results without their models), ``finished``, ``dataset``, ``runs`` and
    :meth:`predictions` (the decision-boundary grids, computed in the worker). A worker that ends, is
    killed or overruns during a call fails every run still training with how it ended (status "failed");
    the worker is replaced, this server and the other sessions go on (a session the replaced worker held
    is built again in the new one and retrained to its epoch at its next call: see :meth:`_ask`).

    Time limit of one call: :func:`explorer.worker.call_seconds` per run (the first chunk traces each run's
    training step), plus the call's training budget."""

    def __init__(self, state: Any) -> None:
        """``state``: the :class:`explorer.train.TrainState` of the session, as :class:`explorer.train.Session` takes it."""
        import uuid

        self.state = state
        self.dataset = state.dataset()
        self.runs = list(state.runs)
        self.id = uuid.uuid4().hex
        self._lock = threading.RLock()
        self._failure: str | None = None
        self._descriptions = [_describe(run) for run in self.runs]
        self._controls = state.replace(runs=())  # the runs go as descriptions: a loaded op is rebuilt there by key
        try:
            state = self._remote(_new_session_here, self.id, self._controls, self._descriptions, seconds=0.0)
        except worker.NotSendable:
            raise ValueError(
                "an editor op cannot be trained in one session with a loaded op or layer; compare them in two sessions"
            ) from None
        except (worker.WorkerFailure, LookupError) as error:
            raise ValueError(f"the models could not be built: {getattr(error, 'how', error)}") from None
        self._set(state)

    def _remote(self, function: Callable[..., Any], *args: Any, seconds: float) -> tuple:
        limit = worker.call_seconds() * max(1, len(self.runs)) + seconds
        return _call(TRAINING, function, *args, time_limit=limit)

    def _set(self, state: tuple) -> None:
        from explorer.train import trainer as train

        epoch, finished, rows = state
        self.epoch, self._finished = epoch, finished
        self._results = [
            train.RunResult(run, status, history, diverged, seconds, rate, None, error)
            for run, (status, history, diverged, seconds, rate, error) in zip(self.runs, rows, strict=True)
        ]

    def _fail(self, how: str) -> None:
        """Every run still training fails with ``how`` (kept: the history trained so far)."""
        self._failure = how
        self._finished = True
        for result in self._results:
            if result.status in ("ok", "no_gradient"):
                result.status, result.error = "failed", how

    def _update(self, function: Callable[..., Any], *args: Any, seconds: float = 0.0) -> None:
        if self._failure is not None:
            return
        try:
            self._set(self._ask(function, *args, seconds=seconds))
        except worker.WorkerFailure as error:
            self._fail(f"the training step {error.how}; the worker process was replaced")
        except LookupError as error:
            self._fail(str(error.args[0]))

    def _ask(self, function: Callable[..., Any], *args: Any, seconds: float) -> Any:
        """``function(id, *args)`` in the worker; if the worker no longer has this session (another
        session's op ended it, or it dropped the oldest), the session is built again there and trained
        back to its epoch first (training is deterministic: same seed, same batches, same numbers)."""
        try:
            return self._remote(function, self.id, *args, seconds=seconds)
        except LookupError:
            pass
        self._remote(_new_session_here, self.id, self._controls, self._descriptions, seconds=0.0)
        if self.epoch > 0:
            self._remote(_train_to_here, self.id, self.epoch, None, seconds=0.0)
        return self._remote(function, self.id, *args, seconds=seconds)

    @property
    def finished(self) -> bool:
        return self._finished

    def train_to(self, target_epoch: int, *, seconds: float | None = None) -> int:
        with self._lock:
            if not self._finished and target_epoch > self.epoch:
                self._update(_train_to_here, int(target_epoch), seconds, seconds=seconds or 0.0)
            return self.epoch

    def step(self, epochs: int = 1) -> list:
        with self._lock:
            self._update(_step_here, int(epochs))
            return list(self._results)

    def reset(self) -> None:
        with self._lock:
            self._update(_reset_here)

    def snapshot(self) -> tuple[int, list]:
        with self._lock:
            return self.epoch, list(self._results)

    def results(self) -> list:
        return self.snapshot()[1]

    def predictions(self, resolution: int = 100) -> list:
        """One :class:`explorer.train.trainer.GridPrediction` per run, computed in the worker; NaN grids
        once the session failed (its models are gone with its worker)."""
        from explorer.train import trainer as train

        with self._lock:
            if self._failure is None:
                try:
                    return self._ask(_predictions_here, int(resolution), seconds=0.0)
                except worker.WorkerFailure as error:
                    self._fail(f"drawing its predictions {error.how}; the worker process was replaced")
                except LookupError as error:
                    self._fail(str(error.args[0]))
            empty = train.predict_grid(_NanModel(), self.dataset, resolution=resolution)
            return [empty for _ in self.runs]


class _NanModel:
    """Stands in for a model lost with its worker: NaN everywhere (an empty plot)."""

    def __call__(self, points: Any, training: bool = False) -> Any:
        return tf.fill((tf.shape(points)[0], 1), float("nan"))
