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
* User code is not trusted to behave: :func:`sweep` runs a loaded op with a time limit, probes its
  forward and backward on a few points first (exception, NaN everywhere, wrong shape or dtype: a
  :class:`UserOpError` naming it, in place of the figure), and when it fails inside ``tf.function``
  (NumPy calls) sweeps it eagerly and keeps the graph failure for the page (:func:`graph_failure`).
  Failures are remembered per inputs, so a hung op costs its time limit once, not on every rerun.
* The checker's results (:func:`checks`) run in one background worker thread, once per (op,
  parameters): they take seconds (a ``Model.fit`` and a SavedModel export), and the figure must not wait.
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
from explorer.checker import discover
from explorer.checker.timelimit import call_with_time_limit
from explorer.explore import sweeps
from explorer.serve import OPS_ENV

SWEEP_TIME_LIMIT = 20.0  # seconds for one probe + sweep of a loaded op (a first trace takes about 1 s)
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


@dataclass(frozen=True)
class LoadedLayer:
    """One loaded ``keras.layers.Layer`` subclass (built with no arguments) and the key of the loaded op
    it calls (found by comparing outputs and input gradients), or None if none matched."""

    key: str
    name: str
    module: str
    layer_class: type
    op_key: str | None


@dataclass(frozen=True)
class Loaded:
    """What ``GRADIENT_EXPLORER_OPS`` gave: ops and layers by key, and one :class:`discover.LoadError`
    per target (or function) that gave nothing usable."""

    targets: tuple[str, ...] = ()
    ops: Mapping[str, LoadedOp] = field(default_factory=dict)
    layers: Mapping[str, LoadedLayer] = field(default_factory=dict)
    errors: tuple[discover.LoadError, ...] = ()

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
DECLARED_KEYWORDS = ("forward", "points", "ranges", "title", "justification", "input_shapes")


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
        drawable = _drawable(spec)
        if drawable is not None:
            errors.append(discover.LoadError(f"{item.module}.{item.name}", "NotDrawable", drawable))
            continue
        loaded_ops[key] = LoadedOp(key, name, item.module, spec)
    layers: dict[str, LoadedLayer] = {}
    for item in found.layers:
        key = item.name if item.name not in loaded_ops and item.name not in layers else f"{item.module}.{item.name}"
        siblings = {k: op.spec for k, op in loaded_ops.items() if op.module == item.module}
        try:  # the layer is built and called: user code, under a time limit
            op_key = run_limited(lambda item=item, siblings=siblings: _op_the_layer_calls(item.obj, siblings), SWEEP_TIME_LIMIT)
        except TimeoutError:
            op_key = None
        layers[key] = LoadedLayer(key, item.name, item.module, item.obj, op_key)
    return Loaded(targets, loaded_ops, layers, tuple(errors))


def _drawable(spec: ops.OpSpec) -> str | None:
    """Why the pages cannot draw this function as a curve yet (several tensor inputs, several or reduced
    outputs, captured variables), or None. The checker checks it: ``python -m explorer verify FILE``."""
    user = spec.user_function
    if len(user.inputs) > 1:
        what = f"it takes {len(user.inputs)} tensor inputs ({', '.join(user.inputs)})"
    else:
        try:
            if run_limited(lambda: user.is_elementwise(spec.defaults()), SWEEP_TIME_LIMIT):
                return None
        except Exception:  # noqa: BLE001 - a forward that raises or hangs is reported by the pages as before
            return None
        what = "its output is not x's shape element by element (a reduction, several outputs or a variable)"
    return (
        f"cannot be drawn as a curve yet: {what}. Check it with `python -m explorer verify {user.name}'s file` "
        "or assert_custom_gradient"
    )


_LOCK = threading.Lock()
_CURRENT: dict[str, Loaded] = {}


def current() -> Loaded:
    """The ops of this server process: loaded from ``GRADIENT_EXPLORER_OPS`` at the first call, then kept."""
    with _LOCK:
        if "loaded" not in _CURRENT:
            _CURRENT["loaded"] = load(os.environ.get(OPS_ENV))
        return _CURRENT["loaded"]


def reset() -> None:
    """Forget the loaded ops (and what was remembered about them); the next :func:`current` loads again."""
    with _LOCK:
        _CURRENT.clear()
        _FAILURES.clear()
        _GRAPH_FAILURES.clear()
        _USABLE.clear()
        for future in _CHECKS.values():  # checks not started yet are dropped, not run for ops now forgotten
            future.cancel()
        _CHECKS.clear()


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


# -- running user code safely ---------------------------------------------------------------------------
def run_limited(function: Callable[[], Any], time_limit: float) -> Any:
    """``function()`` within ``time_limit`` seconds (see :mod:`explorer.checker.timelimit`)."""
    return call_with_time_limit(function, time_limit, name="loaded-op")


def _text(error: BaseException) -> str:
    """``Type: message`` on one line, the last line of a traced error, at most 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "in user code" in lines[0] else " ".join(lines)
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


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
    """:func:`explorer.explore.sweeps.sweep` of a built-in or loaded op; a loaded op under the guards of the
    module docstring (UserOpError for its failures, ValueError for invalid inputs as for any op)."""
    spec = get(op)
    if not is_loaded(spec.key) or spec.user_function is None:
        return sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=params, upstream=upstream, dtype=dtype)
    # invalid inputs are ValueErrors as for any op, raised here, outside the guards: inside them every
    # exception comes from the user's code
    resolved = spec.resolve(params)
    dtype = sweeps.validate_dtype(dtype)
    lo, hi, n = sweeps.validate_range(lo, hi, n, dtype)
    upstream = sweeps.validate_upstream(upstream, dtype)
    remembered = (spec.key, tuple(sorted(resolved.items())), lo, hi, n, dtype, upstream)
    if remembered in _FAILURES:
        raise _FAILURES[remembered]
    limit = SWEEP_TIME_LIMIT if time_limit is None else time_limit

    def guarded() -> sweeps.Sweep:
        probe(spec, resolved, lo, hi, dtype, upstream)
        try:
            return sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=resolved, upstream=upstream, dtype=dtype)
        except Exception as error:  # noqa: BLE001 - fails inside tf.function: show it eagerly
            if sweeps.is_eager(spec):
                raise
            _GRAPH_FAILURES[spec.key] = _text(error)
            sweeps.run_eagerly(spec)
            return sweeps.sweep(spec, lo=lo, hi=hi, n=n, params=resolved, upstream=upstream, dtype=dtype)

    try:
        return run_limited(guarded, limit)
    except UserOpError as error:
        failure = error
    except TimeoutError as error:
        failure = UserOpError(f"{spec.key} {error}; the sweep was abandoned")
    except Exception as error:  # noqa: BLE001 - anything else the user's code raised
        failure = UserOpError(f"{spec.key} raised {_text(error)} while being swept")
    _remember(_FAILURES, remembered, failure)
    raise failure


_USABLE: OrderedDict[tuple, str | None] = OrderedDict()


def problem(key: str, params: Mapping[str, float] | None = None) -> str | None:
    """Why loaded op ``key`` cannot be trained at ``params`` (its forward or backward raises, hangs, is NaN
    everywhere or has the wrong shape or dtype on the probe of :func:`probe`, float32 on [-3, 3]), or
    None (also for a built-in). Remembered per (op, parameters): the Train page asks on every rerun."""
    spec = get(key)
    if not is_loaded(spec.key) or spec.user_function is None:
        return None
    resolved = spec.resolve(params)
    remembered = (spec.key, tuple(sorted(resolved.items())))
    if remembered not in _USABLE:
        try:
            run_limited(lambda: probe(spec, resolved, -3.0, 3.0, "float32", 1.0), SWEEP_TIME_LIMIT)
            found = None
        except UserOpError as error:
            found = str(error)
        except TimeoutError as error:
            found = f"{spec.key} {error}"
        except Exception as error:  # noqa: BLE001 - anything else the user's code raised
            found = f"{spec.key} raised {_text(error)}"
        _remember(_USABLE, remembered, found)
    return _USABLE[remembered]


# -- the checker, in the background ----------------------------------------------------------------------
_EXECUTOR = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="loaded-checks")
_CHECKS: OrderedDict[tuple, concurrent.futures.Future] = OrderedDict()


def _run_checks(spec: ops.OpSpec, params: Mapping[str, float], time_limit: float) -> tuple:
    from explorer.checker import user as usercheck  # keras and the checks load only when a check is asked for

    return tuple(usercheck.check_function(spec, time_limit=time_limit, **params))


def checks(key: str, params: Mapping[str, float], *, time_limit: float = CHECK_TIME_LIMIT) -> concurrent.futures.Future:
    """The checker's results (a tuple of :class:`explorer.verify.Check`) for loaded op ``key`` at ``params``,
    as a Future: computed once per (op, parameters) by one background worker (one core, so a sweep
    keeps the other). Asking for other parameters of the same op cancels its requests not yet
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
        future = _EXECUTOR.submit(_run_checks, spec, resolved, time_limit)
        _remember(_CHECKS, cache_key, future)
        return future
