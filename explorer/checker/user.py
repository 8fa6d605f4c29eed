"""The checks of every op: your ``@tf.custom_gradient`` functions, Keras layers, and the built-in and editor ops.

:func:`check_function` takes an op made by :func:`ops.from_function` and runs, each on your own function
(called the way its signature asks; parameters that keep their default are not passed). An op that declares
its forward and surrogate (a built-in, an editor op: ``spec.declares_surrogate``) is checked as the function
:func:`ops.user.from_spec` makes of it, its declared forward the true one:

1. ``finite``: on the sweep grid of [-3, 3] (float32) and at each dtype's hard places
   (:data:`HARD_PLACES`: 0, a tiny number, 1e4 and where ``exp`` overflows). A NaN forward or gradient,
   or an infinite gradient where the forward is finite, fails; a forward that overflows because its
   true value (your forward in float64) does not fit the dtype is only noted, and so is one at or beyond
   a declared ``singular`` point of that dtype (same side of 0): the overflow is documented;
2. ``shape_dtype``: gradient and output keep x's shape and dtype (float16/32/64; scalar, vector, batch);
3. ``graph``: eager, ``tf.function`` and ``jit_compile=True`` agree, with a non-default parameter
   passed as your signature passes it (so keyword parameters and NumPy calls fail here, named);
4. ``keras_fit``: one ``Model.fit`` step through a layer that calls your function;
5. ``special_points``: without declared points the detected ones are listed (no failure); with
   declared points, one declared but absent or one detected but undeclared is a warning. An op that
   declares its surrogate must declare every point: one detected but undeclared fails;
6. ``vs_autodiff``: your gradient against the true one (autodiff of a declared forward, else the
   numerical derivative); a constant ratio is named ("half of autodiff"). Only a declared justification
   makes a difference intentional (a docstring is quoted as context); undeclared, a difference from an
   informative true gradient (finite, not zero, away from a jump or kink) warns, one where the true
   gradient is zero or missing (a step: a surrogate's reason to exist) passes and says so. A built-in's
   difference is intentional (its ``why`` quoted); an editor op's difference warns;
7. ``saved_model``: a model using your function, ``model.export``-ed and reloaded, still has your
   gradient (not autodiff, not an error; NaN compared equal to NaN).

Flags (a bool or string default) are checked at each value by ``finite``, ``shape_dtype`` and ``graph``.
Where the float64 forward is NaN (outside the function's domain, e.g. ``log(sinh(x))`` for x < 0), ``finite``
and ``vs_autodiff`` say so and do not count it, and ``keras_fit`` maps its inputs into the domain.
A function of several inputs or outputs, a non-elementwise one (a norm, a matrix product) or one that reads
a variable gets the same seven checks from :mod:`explorer.checker.general` (``special_points`` a ``skip``: it
does not apply); one for which no input assignment works fails every check, "not checked".

:func:`check_layer` takes a ``keras.layers.Layer`` subclass (built with no arguments): ``keras_fit``,
``input_gradient`` (the layer's input gradient equals the custom gradient of the function it calls),
``keras_save`` (``.keras`` save and load; an unregistered layer warns) and ``saved_model``.

A check never raises and never hangs: each runs in a worker thread for at most ``time_limit``
seconds. A check that overruns fails; its thread is a daemon that is abandoned, not killed (Python
cannot stop a thread, and TensorFlow cannot interrupt a running op), so it may use a core until the
process exits.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ops
from explorer.checker import general
from explorer.checker.checks import (
    SWEEP_N,
    SWEEP_RANGE,
    UPSTREAM,
    Check,
    _error_text,
    _fmt,
    _graph_differences,
    _grid,
    _guarded,
    _result,
    _where,
    check_keras_fit,
    check_shape_dtype,
    undeclared_difference,
    value_and_grad,
)
from explorer.checker.timelimit import TimeLimitExceeded, call_with_time_limit
from explorer.explore.sweeps import sweep

FUNCTION_CHECKS: dict[str, str] = {
    "finite": "forward and gradient finite on the sweep and at each dtype's hard places",
    "shape_dtype": "gradient and output keep x's shape and dtype (float16/32/64; scalar, vector, batch)",
    "graph": "eager, tf.function and jit_compile=True agree, parameters passed as the signature asks",
    "keras_fit": "one Model.fit step through a layer calling the function: finite loss, gradient flows",
    "special_points": "declared special points agree with the detected ones",
    "vs_autodiff": "the custom gradient against the true one (declared forward or numerical), justified",
    "saved_model": "model.export + reload keeps the custom gradient",
}
LAYER_CHECKS: dict[str, str] = {
    "keras_fit": "one Model.fit step with the layer: finite loss, gradient flows",
    "input_gradient": "the layer's input gradient equals the custom gradient of the function it calls",
    "keras_save": ".keras save and load give the same output and gradient",
    "saved_model": "model.export + reload keeps the custom gradient",
}
TIME_LIMIT = 120.0  # seconds per check; a Model.fit plus an export takes a few seconds on 2 cores
# Per dtype: 0, a tiny number, a large one, and inputs where exp() overflows (log of the max is
# 11.1 for float16, 88.7 for float32, 709.8 for float64).
HARD_PLACES: dict[str, tuple[float, ...]] = {
    "float16": (0.0, 6e-08, -6e-08, 12.0, -12.0, 1e4, -1e4),
    "float32": (0.0, 1e-30, -1e-30, 100.0, -100.0, 1e4, -1e4),
    "float64": (0.0, 1e-30, -1e-30, 1000.0, -1000.0, 1e4, -1e4),
}
COMPARE_TOLERANCE = {"rtol": 1e-4, "atol": 1e-6}
RATIO_TOLERANCE = 1e-3
ZERO_GRADIENT = COMPARE_TOLERANCE["atol"] * 10  # a true gradient this small is zero (a flat forward)
RATIO_WORDS = {0.5: "half of", 2.0: "twice", -1.0: "the negative of", 0.0: "zero times"}
HINTS = (
    (
        "keywords arguments only when eager",
        "keyword arguments to a @tf.custom_gradient function fail inside tf.function and Model.fit: make the "
        "parameter positional-only (def f(x, slope=25.0, /)) and return one gradient per positional input "
        "(None for the parameter), or close over it",
    ),
    (
        "must accept keyword argument 'variables'",
        "the function reads a tf.Variable: its backward must take variables=None and return (input gradients, "
        "[one gradient per variable])",
    ),
    (
        "numpy",
        "NumPy (.numpy(), np.*) inside the function or its backward works only eagerly: use TensorFlow ops",
    ),
    (
        "expected to return",
        "return exactly one gradient per positional input of the function (None for a parameter)",
    ),
)


# -- running a check within a time limit --------------------------------------------------------------
def run_limited(name: str, function: Callable[[], Check], time_limit: float = TIME_LIMIT) -> Check:
    """``function()`` in a daemon worker thread; a failed :class:`Check` if it raises or overruns.

    An overrunning thread is abandoned, not stopped (see the module docstring).
    """
    try:
        return call_with_time_limit(function, time_limit, name=f"check-{name}")
    except TimeLimitExceeded:
        return _result(
            name,
            "fail",
            f"TimeoutError: the check did not finish within {time_limit:g} s (a hung or very slow forward or "
            "backward); its worker thread was abandoned",
        )
    except BaseException as error:  # noqa: BLE001 - user code may even raise SystemExit
        return _result(name, "fail", f"the check raised {_explained(error)}")


def _explained(error: BaseException) -> str:
    text = _error_text(error)
    hints = [hint for marker, hint in HINTS if marker in str(error)]
    return text.rstrip(". ") + (f". Fix: {hints[0]}" if hints else "")


# -- calling the user's function ----------------------------------------------------------------------
def _user(spec: ops.OpSpec) -> ops.user.UserFunction:
    """Your function; for an op that declares forward and surrogate, the function it stands for."""
    return ops.user.from_spec(spec) if spec.user_function is None else spec.user_function


def _changed(spec: ops.OpSpec, params: Mapping[str, float]) -> dict[str, float]:
    """The parameters that differ from fn's defaults: only those are passed."""
    defaults = spec.defaults()
    return {name: value for name, value in params.items() if value != defaults[name]}


class CallsYourFunction(keras.layers.Layer):
    """A layer that calls a user's custom-gradient function (as its signature asks) on its input."""

    def __init__(
        self,
        user: ops.user.UserFunction,
        params: Mapping[str, float] | None = None,
        domain: tuple[float, float] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.user = user
        self.call_params = dict(params or {})
        self.domain = domain  # (lo, hi): inputs are mapped into it (lo + (hi - lo) * sigmoid), for a training model

    def call(self, inputs):
        if self.domain is not None:
            lo, hi = self.domain
            inputs = lo + (hi - lo) * tf.math.sigmoid(inputs)
        return self.user.call(inputs, self.call_params)

    def compute_output_shape(self, input_shape):
        return input_shape


def _caller(
    spec: ops.OpSpec, params: Mapping[str, float], flags: Mapping[str, Any] | None = None
) -> Callable[[tf.Tensor], tf.Tensor]:
    user, given = _user(spec), _changed(spec, params)
    return lambda x: user.call(x, given, flags)


# -- function checks ------------------------------------------------------------------------------------
def _at(x: np.ndarray, sweep_size: int, mask: np.ndarray) -> str:
    """Where ``mask`` holds: runs on the first ``sweep_size`` (sorted sweep) points, then each hard place."""
    parts = [] if not mask[:sweep_size].any() else [_where(x[:sweep_size], mask[:sweep_size])]
    on_sweep = set(x[:sweep_size][mask[:sweep_size]])  # 0 is both a sweep point and a hard place
    places = [_fmt(value) for value in x[sweep_size:][mask[sweep_size:]] if value not in on_sweep]
    if places:
        parts.append("x = " + ", ".join(places))
    return ", ".join(parts)


def _forward64(user: ops.user.UserFunction, x64: np.ndarray, params: Mapping[str, float], flags) -> np.ndarray:
    """The undecorated forward in float64 at ``x64`` (all finite if it does not run in float64)."""
    try:
        values = user.forward_values(tf.constant(x64, tf.float64), params, flags).numpy()
        return np.broadcast_to(np.asarray(values, np.float64), x64.shape)
    except Exception:  # noqa: BLE001 - e.g. a float32 variable: no domain to infer
        return np.zeros_like(x64)


def _gradient_too_large(call: Callable[[tf.Tensor], tf.Tensor], x64: np.ndarray, dtype: str) -> np.ndarray:
    """Where the function's own float64 gradient is finite but does not fit ``dtype`` (an overflow that is no
    bug; an infinite float64 gradient is one)."""
    try:
        _, grad = value_and_grad(call, tf.constant(x64, tf.float64))
        values = np.abs(np.asarray(grad.numpy(), np.float64))
    except Exception:  # noqa: BLE001 - no float64 gradient to tell
        return np.zeros(x64.shape, bool)
    return np.isfinite(values) & (values > float(np.finfo(dtype).max))


def _beyond_singular_point(spec: ops.OpSpec, params: Mapping[str, float], x64: np.ndarray, dtype: str) -> np.ndarray:
    """Where x is at or beyond a declared ``singular`` point of ``dtype`` (on the same side of 0): a forward
    that overflows there is documented (``log1pexp``'s naive forward from the onset of exp's overflow)."""
    documented = np.zeros(x64.shape, bool)
    for point in spec.points(-np.inf, np.inf, dtype, **params):
        if point.kind == "singular":
            documented |= (x64 == point.x) | ((point.x != 0) & (x64 * np.sign(point.x) >= abs(point.x)))
    return documented


@_guarded("finite")
def check_finite(spec: ops.OpSpec, params: Mapping[str, float], flags: Mapping[str, Any] | None = None) -> Check:
    """Where the float64 forward itself is NaN (outside the function's domain) nothing is counted."""
    user, call = _user(spec), _caller(spec, params, flags)
    problems: list[str] = []
    notes: list[str] = []
    domain = np.zeros(0, bool)
    largest = 0.0
    sweep_x = _grid(spec, params)
    for dtype, places in HARD_PLACES.items():
        x_values = np.asarray(places, dtype=dtype)
        if dtype == "float32":
            x_values = np.concatenate([sweep_x, x_values]).astype(dtype)
        x = tf.constant(x_values)
        y, grad = value_and_grad(call, x)
        if grad is None:
            return _result(
                "finite",
                "fail",
                f"the custom gradient is None ({dtype}): the backward returned None for x, so nothing upstream "
                "learns; return a tensor shaped like x, e.g. dy * g(x)",
            )
        x64 = x_values.astype(np.float64)
        forward = np.asarray(y.numpy(), dtype=np.float64)
        gradient = np.asarray(grad.numpy(), dtype=np.float64)
        if gradient.shape != x64.shape or forward.shape != x64.shape:
            return _result(
                "finite",
                "fail",
                f"{dtype}: the gradient has shape {gradient.shape} and the output {forward.shape} for x of shape "
                f"{x64.shape} (see shape_dtype)",
            )
        where = functools.partial(_at, x64, sweep_x.size if dtype == "float32" else 0)
        outside = np.isnan(_forward64(user, x64, {**spec.defaults(), **params}, flags))
        if dtype == "float32":
            domain = outside[: sweep_x.size]
        for what, values in (("forward", forward), ("gradient", gradient)):
            if (np.isnan(values) & ~outside).any():
                problems.append(f"{dtype}: the {what} is NaN at {where(np.isnan(values) & ~outside)}")
        gradient = np.where(outside, 0.0, gradient)
        inf_grad = np.isinf(gradient) & np.isfinite(forward)
        if inf_grad.any() and dtype != "float64":
            too_large = _gradient_too_large(call, x64[inf_grad], dtype)
            if too_large.any():
                notes.append(f"{dtype} gradient overflows where its float64 value does not fit {dtype}")
                inf_grad[np.flatnonzero(inf_grad)[too_large]] = False
        if inf_grad.any():
            problems.append(f"{dtype}: the gradient is infinite at {where(inf_grad)} where the forward is finite")
        overflow = np.isinf(forward) & ~outside
        documented = overflow & _beyond_singular_point(spec, params, x64, dtype)
        if documented.any():
            overflow &= ~documented
            notes.append(f"{dtype} forward overflows at {where(documented)}, documented by a declared singular point")
        if overflow.any():
            at = tf.constant(x64[overflow])
            true64 = user.forward_values(at, {**spec.defaults(), **params}, flags).numpy() if dtype != "float64" else None
            if true64 is None:
                notes.append(
                    f"float64 forward overflows at {where(overflow)} (no wider dtype to tell whether it should)"
                )
            else:
                fits = np.abs(true64) <= float(np.finfo(dtype).max)
                overflow_that_fits = np.zeros_like(overflow)
                overflow_that_fits[np.flatnonzero(overflow)[fits]] = True
                if fits.any():
                    problems.append(
                        f"{dtype}: the forward overflows to inf at {where(overflow_that_fits)} although its true value "
                        f"(float64: {_fmt(float(true64[fits][0]))}) fits {dtype}"
                    )
                if (~fits).any():
                    notes.append(f"{dtype} forward overflows where its true value does not fit {dtype}")
        finite = gradient[np.isfinite(gradient)]
        if finite.size:
            largest = max(largest, float(np.abs(finite).max()))
    if problems:
        return _result(
            "finite", "fail", "; ".join(problems[:4]) + ". Use a stable formula (see RUNBOOK.md, NaN gradient)"
        )
    lo, hi = SWEEP_RANGE
    if domain.any():
        notes.append(
            f"the float64 forward is NaN at {_where(sweep_x.astype(np.float64), domain)} (outside the function's "
            "domain): not counted"
        )
    note = f"; noted: {'; '.join(notes)}" if notes else ""
    return _result(
        "finite",
        "pass",
        f"finite on {sweep_x.size} points of [{lo:g}, {hi:g}] and at 0, +-tiny, +-1e4 and exp-overflow inputs "
        f"(float16 +-12, float32 +-100, float64 +-1000); max |g| = {_fmt(largest)}{note}",
    )


def _graph_values(spec: ops.OpSpec, params: Mapping[str, float]) -> dict[str, float]:
    """A value other than fn's default for every parameter, always passed (by keyword where the signature
    says so): the keyword path under ``tf.function`` is what this check is for."""
    defaults, used = spec.defaults(), {}
    for param in spec.params:
        for candidate in ((params[param.name] + param.high) / 2.0, (param.low + defaults[param.name]) / 2.0, param.low):
            value = float(round(candidate)) if param.integer else candidate
            if value != defaults[param.name]:
                break
        used[param.name] = value
    return used


def _passed(user: ops.user.UserFunction, used: Mapping[str, float], flags: Mapping[str, Any] | None) -> str:
    """" with slope=12 by keyword, clip=True by keyword": how the non-default values were passed."""
    parts = [f"{k}={_fmt(v)} by keyword" if k in user.keyword else f"{k}={_fmt(v)} positionally" for k, v in used.items()]
    for name, value in (flags or {}).items():
        if value == user.flags[name][0]:
            parts.append(f"{name}={value!r} (its default, not passed)")
        else:
            how = "positionally" if name in user.positional_flags else "by keyword"
            parts.append(f"{name}={value!r} {how}")
    return f" with {', '.join(parts)}" if parts else ""


@_guarded("graph")
def check_graph(spec: ops.OpSpec, params: Mapping[str, float], flags: Mapping[str, Any] | None = None) -> Check:
    x_values = _grid(spec, params, n=61)
    x = tf.constant(x_values)
    used = _graph_values(spec, params)
    call = (lambda x: _user(spec).call(x, used, flags)) if used else _caller(spec, params, flags)
    upstream = tf.fill(tf.shape(x), tf.constant(UPSTREAM, x.dtype))
    passed = _passed(_user(spec), used, flags)
    try:
        eager_y, eager_grad = value_and_grad(call, x, upstream)
    except Exception as error:  # noqa: BLE001
        return _result("graph", "fail", f"eager call{passed} raised {_explained(error)}")
    if eager_grad is None:
        return _result("graph", "fail", "the eager custom gradient is None (see the 'finite' check)")
    expected = {"forward": eager_y.numpy(), "gradient": eager_grad.numpy()}
    problems: list[str] = []
    for label, jit in (("tf.function", False), ("jit_compile=True", True)):

        @tf.function(jit_compile=jit, autograph=False)
        def compiled(x):
            y, grad = value_and_grad(call, x, tf.fill(tf.shape(x), tf.constant(UPSTREAM, x.dtype)))
            return y, (tf.fill(tf.shape(x), tf.constant(np.nan, x.dtype)) if grad is None else grad)

        try:
            got_y, got_grad = compiled(x)
        except Exception as error:  # noqa: BLE001
            problems.append(f"{label}{passed} raised {_explained(error)}")
            break  # the same error again under XLA says nothing new
        problems += _graph_differences(label, {"forward": got_y, "gradient": got_grad}, expected, x_values)
    if problems:
        return _result("graph", "fail", "; ".join(problems[:3]))
    return _result(
        "graph",
        "pass",
        f"eager, tf.function and jit_compile=True agree on {x_values.size} points (forward and gradient, upstream "
        f"{UPSTREAM:g}){passed}",
    )


@_guarded("special_points")
def check_special_points(spec: ops.OpSpec, params: Mapping[str, float], result: Any = None) -> Check:
    from explorer.explore.points import special_points

    lo, hi = SWEEP_RANGE
    result = sweep(spec, lo, hi, SWEEP_N, params=params) if result is None else result
    table = special_points(result)
    status = table["status"].astype(str)

    def listing(rows) -> str:
        return ", ".join(f"x = {_fmt(r.x)} ({r.kind})" for r in rows.head(4).itertuples())

    if len(table) == 0:
        return _result("special_points", "pass", f"none declared, none detected in [{lo:g}, {hi:g}]")
    if not result.declared_points and not spec.declares_surrogate:
        return _result(
            "special_points",
            "pass",
            f"none declared; detected: {listing(table)}. Declaring them (points=[(x, kind)]) puts the value AT "
            "each point on the sweep grid",
        )
    undeclared, missing = table[status == "undeclared"], table[status == "not detected"]
    parts = []
    if len(undeclared):
        parts.append(f"detected but not declared: {listing(undeclared)}")
    if len(missing):
        parts.append(f"declared but not detected: {listing(missing)}")
    if len(undeclared) and spec.declares_surrogate:
        return _result(
            "special_points",
            "fail",
            f"{len(undeclared)} undeclared special point(s): {'; '.join(parts)}. An op that declares its forward and "
            "surrogate declares every point, so that the value AT the point is on the grid and documented",
        )
    if parts:
        return _result("special_points", "warn", "; ".join(parts))
    return _result(
        "special_points", "pass", f"all {int((status == 'ok').sum())} declared point(s) detected, none undeclared"
    )


def _ratio_words(ratio: float) -> str:
    for value, words in RATIO_WORDS.items():
        if abs(ratio - value) <= RATIO_TOLERANCE * max(1.0, abs(value)):
            return words
    return f"{ratio:.4g} times"


def _difference_summary(
    x: np.ndarray, custom: np.ndarray, true: np.ndarray, compared: np.ndarray, differs: np.ndarray, truth: str
) -> str:
    """How the custom gradient differs from the true one on the ``compared`` points: a constant factor
    ("half of autodiff", "the negative of autodiff"), else the largest gap and where (``differs``)."""
    lo, hi = SWEEP_RANGE
    nonzero = compared & (np.abs(true) > ZERO_GRADIENT)
    ratio = custom[nonzero] / true[nonzero] if nonzero.any() else np.array([])
    typical = float(np.median(ratio)) if ratio.size else np.nan
    zeros_agree = np.allclose(custom[compared & ~nonzero], 0.0, atol=ZERO_GRADIENT)
    if ratio.size and np.allclose(ratio, typical, rtol=RATIO_TOLERANCE) and zeros_agree:
        words = _ratio_words(typical)
        return (
            f"the custom gradient is {words} autodiff: {_fmt(typical)} x {truth} on all {int(compared.sum())} "
            f"points of [{lo:g}, {hi:g}]"
        )
    gap = np.where(differs, np.abs(custom - true), 0.0)
    worst = int(np.argmax(gap))
    return (
        f"the custom gradient differs from {truth} by up to {_fmt(gap[worst])} at x = {_fmt(x[worst])} "
        f"(on {int(differs.sum())} of {x.size} points: {_where(x, differs, limit=2)})"
    )


def _near_special_points(result: Any, points: Any, x: np.ndarray) -> np.ndarray:
    """Where x is a special point of the sweep (declared or detected: a jump or kink of the forward, a
    boundary of the custom gradient), within the matching tolerance of 1.5 grid steps: there the derivative
    is not defined and the value AT the point is a convention."""
    from explorer.explore.points import special_points

    near = np.zeros(x.shape, bool)
    try:
        table = special_points(result) if points is None else points
    except Exception:  # noqa: BLE001 - e.g. a gradient of the wrong shape: no point excuses a difference
        return near
    for at in table["x"].to_numpy(dtype=np.float64):
        near |= np.abs(x - at) <= 1.5 * result.grid_step
    return near


@_guarded("vs_autodiff")
def check_vs_autodiff(spec: ops.OpSpec, params: Mapping[str, float], result: Any = None, points: Any = None) -> Check:
    """``result``: the sweep (made here if not given); ``points``: its special-points table, read only for
    an undeclared difference (made here if not given)."""
    lo, hi = SWEEP_RANGE
    result = sweep(spec, lo, hi, SWEEP_N, params=params) if result is None else result
    df = result.frame
    x = df["x"].to_numpy(dtype=np.float64)
    custom = df["custom_grad"].to_numpy(dtype=np.float64)
    true = df["true_grad"].to_numpy(dtype=np.float64)
    numerical = spec.true_gradient == "numerical"
    truth = "the true gradient (numerical)" if numerical else "the true gradient (autodiff of the declared forward)"
    if not numerical:
        own = spec.apply(tf.constant(x.astype(np.float32)), **params).numpy().astype(np.float64)
        declared = df["forward"].to_numpy(dtype=np.float64)
        wrong = ~np.isclose(own, declared, equal_nan=True, **COMPARE_TOLERANCE)
        if wrong.any():
            at = int(np.argmax(wrong))
            return _result(
                "vs_autodiff",
                "fail",
                f"the declared forward differs from your function's forward at {_where(x, wrong, limit=2)} "
                f"(e.g. x = {_fmt(x[at])}: {_fmt(declared[at])} vs {_fmt(own[at])}), so its autodiff is not the "
                "true gradient of your function",
            )
    both = np.isfinite(true) & np.isfinite(custom)
    differs = both & ~np.isclose(custom, true, **COMPARE_TOLERANCE)
    outside = np.isnan(df["forward"].to_numpy(dtype=np.float64))
    if not both.any():  # nothing to compare is not agreement
        which = "the custom gradient" if not np.isfinite(custom).any() else truth
        return _result("vs_autodiff", "warn", f"not meaningful: {which} is not finite anywhere on [{lo:g}, {hi:g}] (see finite)")
    true_bad = ~np.isfinite(true) & np.isfinite(custom) & ~outside
    parts = []
    if outside.any():
        parts.append(f"the forward is NaN at {_where(x, outside)} (outside the function's domain): not compared")
    if true_bad.any():
        parts.append(f"{truth} is NaN/inf at {_where(x, true_bad)} where the custom gradient is finite")
    declared_why = spec.builtin or bool(spec.why.strip())
    if spec.declares_surrogate or declared_why:
        if not differs.any():
            summary = f"the custom gradient equals {truth} on all {int(both.sum())} finite points"
        else:
            summary = _difference_summary(x, custom, true, both, differs, truth)
        text = "; ".join([summary, *parts])
        # a built-in's why is its reviewed justification; an editor op's only says it was typed in
        if spec.declares_surrogate and not spec.builtin and (differs.any() or true_bad.any()):
            return _result(
                "vs_autodiff",
                "warn",
                f"{text}. Intentional? A surrogate usually is: say why in the op's description, or fix the gradient",
            )
        if differs.any() or true_bad.any():
            return _result("vs_autodiff", "pass", f"intentional: {text}. Why: {' '.join(spec.why.split())}")
        return _result("vs_autodiff", "pass", text)
    # Undeclared: only an informative true gradient (finite, not zero, away from a jump or kink) that the
    # custom one differs from needs a declaration; where it is zero or missing (a step) a surrogate passes.
    if not differs.any():
        summary = f"the custom gradient equals {truth} on all {int(both.sum())} finite points"
        return _result("vs_autodiff", "pass", "; ".join([summary, *parts]))
    near = _near_special_points(result, points, x)
    flat = differs & (np.abs(true) <= ZERO_GRADIENT)
    informative = differs & ~flat & ~near
    if informative.any():
        summary = _difference_summary(x, custom, true, both & ~near, informative, truth)
        return _result(
            "vs_autodiff", "warn", f"{'; '.join([summary, *parts])}. {undeclared_difference(spec.user_function, spec.key)}"
        )
    found = []
    if flat.any():
        none = " (autodiff of the forward gives None)" if bool(df["true_grad_missing"].iloc[0]) else ""
        found.append(
            f"{truth} is 0{none} at {_where(x, flat)} where the custom gradient is not: the forward is flat there"
        )
    at_points = differs & near & ~flat
    if at_points.any():
        found.append(
            f"at {_where(x, at_points)}, a jump or kink of the forward, the derivative is not defined (the custom "
            "value there is a convention)"
        )
    agree = int((both & ~differs).sum())
    start = "a surrogate: the custom gradient lets a gradient through where the true one is zero or missing" if (
        flat.any() or true_bad.any()
    ) else f"the custom gradient equals {truth} on {agree} of {int(both.sum())} finite points"
    return _result("vs_autodiff", "pass", "; ".join([start, *found, *parts]))


def _export_and_reload(model: keras.Model, directory: Path):
    path = directory / "exported"
    model.export(str(path), verbose=False)
    return tf.saved_model.load(str(path))


def _equals_true(gradient: np.ndarray, true_call: Callable[[tf.Tensor], tf.Tensor] | None, x: tf.Tensor) -> bool:
    """Whether ``gradient`` is autodiff's gradient of ``true_call`` at ``x`` (False without a true call)."""
    if true_call is None:
        return False
    _, true_grad = value_and_grad(true_call, x)
    return true_grad is not None and np.allclose(gradient, true_grad.numpy(), equal_nan=True, **COMPARE_TOLERANCE)


def _gradient_after_reload(
    name: str, make_layer: Callable[[], keras.layers.Layer], true_call: Callable | None = None
) -> Check:
    """Export a model around ``make_layer()`` with ``model.export``, reload it and compare input gradients."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    inputs = keras.Input(shape=(4,))
    model = keras.Model(inputs, make_layer()(inputs))
    want_y, want_grad = value_and_grad(model, x)
    if want_grad is None:
        return _result(name, "fail", "the model's input gradient is None before export (see finite)")
    with tempfile.TemporaryDirectory() as directory:
        try:
            # TensorFlow prints the traceback of a gradient it cannot save to stderr: the check reports it
            with contextlib.redirect_stderr(io.StringIO()):
                reloaded = _export_and_reload(model, Path(directory))
        except Exception as error:  # noqa: BLE001
            cause = error.__cause__ or error
            return _result(name, "fail", f"model.export raised {_explained(cause)}")
        got_y, got_grad = value_and_grad(reloaded.serve, x)
    if got_grad is None:
        return _result(
            name, "fail", "after model.export and reload the input gradient is None: the custom gradient was lost"
        )
    got, want = got_grad.numpy(), want_grad.numpy()
    if not np.allclose(got_y.numpy(), want_y.numpy(), equal_nan=True, **COMPARE_TOLERANCE):
        return _result(name, "fail", "after model.export and reload the output differs from the original model")
    if not np.allclose(got, want, equal_nan=True, **COMPARE_TOLERANCE):
        gap = float(np.max(np.abs(got - want)))
        lost = ": it equals autodiff, the custom gradient was lost" if _equals_true(got, true_call, x) else ""
        return _result(
            name, "fail", f"after model.export and reload the input gradient differs by up to {_fmt(gap)}{lost}"
        )
    same_as_true = ""
    if _equals_true(want, true_call, x):
        same_as_true = " (here the custom gradient equals the true one, so a lost custom gradient would not show)"
    return _result(
        name,
        "pass",
        f"model.export + tf.saved_model.load: output and input gradient equal the custom ones on 32 inputs{same_as_true}",
    )


@_guarded("saved_model")
def check_saved_model(spec: ops.OpSpec, params: Mapping[str, float]) -> Check:
    """A built-in op through ``ops.SurrogateLayer``, your function through a layer that calls it."""
    if spec.user_function is None:
        make_layer = functools.partial(ops.SurrogateLayer, spec, params=dict(params))
    else:
        make_layer = functools.partial(CallsYourFunction, spec.user_function, _changed(spec, params))
    return _gradient_after_reload("saved_model", make_layer, functools.partial(_true, spec, params))


def _true(spec: ops.OpSpec, params: Mapping[str, float], x: tf.Tensor) -> tf.Tensor:
    return spec.forward(x, **params)


def is_elementwise(user: ops.user.UserFunction, params: Mapping[str, float]) -> bool:
    """See :meth:`ops.user.UserFunction.is_elementwise`: such a function gets the sweep-based checks."""
    return user.is_elementwise(params)


def _each_flag(
    name: str, user: ops.user.UserFunction, check: Callable[[Mapping[str, Any] | None], Check]
) -> Callable[[], Check]:
    """Run ``check`` at every flag setting (both values of a bool, a string's default): the first that does
    not pass, named by its flags; else the default's row, saying which values were checked."""

    def run() -> Check:
        settings = user.flag_settings()
        if settings == [{}]:
            return check(None)
        results = []
        for flags in settings:
            result = check(flags)
            at = ", ".join(f"{k}={v!r}" for k, v in flags.items())
            if result.level != "pass":
                return _result(name, result.level, f"at {at}: {result.message}")
            results.append(result)
        every = " and ".join(", ".join(f"{k}={v!r}" for k, v in flags.items()) for flags in settings)
        return _result(name, "pass", f"{results[0].message} (at {every})")

    return run


def _domain(spec: ops.OpSpec, params: Mapping[str, float]) -> tuple[float, float] | None:
    """The longest run of the sweep grid where the float64 forward is not NaN, if it is NaN anywhere."""
    x = _grid(spec, params).astype(np.float64)
    outside = np.isnan(_forward64(_user(spec), x, {**spec.defaults(), **params}, None))
    if not outside.any() or outside.all():
        return None
    from explorer.explore import detect

    runs = detect.runs(~outside)
    start, end = max(runs, key=lambda r: r[1] - r[0])
    return float(x[start]), float(x[end])


def check_function(
    op: ops.OpSpec | Callable[..., Any], /, *, time_limit: float = TIME_LIMIT, **params: Any
) -> list[Check]:
    """Run :data:`FUNCTION_CHECKS` on an op (a built-in, an editor op, an OpSpec from :func:`ops.from_function`,
    or the function itself).

    One input, elementwise (:func:`is_elementwise`): the sweep-based checks below; any other signature
    (several inputs or outputs, a reduction, captured variables): those of :mod:`explorer.checker.general`."""
    spec = op if isinstance(op, ops.OpSpec) else ops.from_function(op)
    resolved = spec.resolve(params)
    user = _user(spec)
    with _quiet_tensorflow():
        try:
            elementwise = spec.user_function is None or call_with_time_limit(
                lambda: is_elementwise(user, resolved), time_limit, name="check-probe"
            )  # a declared forward is elementwise by its declaration
        except TimeLimitExceeded:
            elementwise = True  # a hung forward: the elementwise checks each report it within their limit
        if not elementwise:
            return _general_plan(spec, resolved, time_limit)
        lo, hi = SWEEP_RANGE
        shared: dict[str, Any] = {}

        def with_sweep(check: Callable[..., Check]) -> Callable[[], Check]:
            def run() -> Check:
                if "sweep" not in shared:
                    shared["sweep"] = sweep(spec, lo, hi, SWEEP_N, params=resolved)
                return check(spec, resolved, shared["sweep"])

            return run

        def keras_fit() -> Check:
            if spec.declares_surrogate:  # Keras uses such an op through ops.SurrogateLayer, as saved_model does
                return check_keras_fit(spec, resolved)
            layer = CallsYourFunction(user, _changed(spec, resolved), domain=_domain(spec, resolved))
            return check_keras_fit(None, resolved, layer=layer)

        plan: Sequence[tuple[str, Callable[[], Check]]] = (
            ("finite", _each_flag("finite", user, lambda flags: check_finite(spec, resolved, flags))),
            (
                "shape_dtype",
                _each_flag(
                    "shape_dtype",
                    user,
                    lambda flags: check_shape_dtype(spec, resolved, call=_caller(spec, resolved, flags)),
                ),
            ),
            ("graph", _each_flag("graph", user, lambda flags: check_graph(spec, resolved, flags))),
            ("keras_fit", keras_fit),
            ("special_points", with_sweep(check_special_points)),
            ("vs_autodiff", with_sweep(check_vs_autodiff)),
            ("saved_model", lambda: check_saved_model(spec, resolved)),
        )
        results = _run_plan(plan, time_limit)
    return _blame_shape(results)


def _general_plan(spec: ops.OpSpec, params: Mapping[str, float], time_limit: float) -> list[Check]:
    """The checks of :mod:`explorer.checker.general`, on input shapes found once (within the time limit)."""
    user, given = _user(spec), _changed(spec, params)

    def call_for(flags: Mapping[str, Any] | None) -> Callable[[Sequence[tf.Tensor]], Any]:
        return lambda inputs: user.call_all(inputs, given, flags)

    try:
        found = call_with_time_limit(lambda: general.find_inputs(user, call_for(None)), time_limit, "check-inputs")
    except TimeLimitExceeded:
        message = f"TimeoutError: finding inputs the function accepts did not finish within {time_limit:g} s"
        return [_result(name, "fail", message) for name in FUNCTION_CHECKS]
    except BaseException as error:  # noqa: BLE001 - user code
        return [_result(name, "fail", f"the check raised {_explained(error)}") for name in FUNCTION_CHECKS]
    if not found.working:
        return _not_checked(user, found)
    values = {**spec.defaults(), **params}

    def passed(flags: Mapping[str, Any] | None) -> str:
        return _passed(user, {}, flags)

    guarded = {name: _guarded(name) for name in FUNCTION_CHECKS}
    plan: Sequence[tuple[str, Callable[[], Check]]] = (
        ("finite", lambda: guarded["finite"](general.check_finite)(user, found, call_for, values)),
        ("shape_dtype", lambda: guarded["shape_dtype"](general.check_shape_dtype)(user, found, call_for)),
        ("graph", lambda: guarded["graph"](general.check_graph)(user, found, call_for, passed)),
        ("keras_fit", lambda: guarded["keras_fit"](general.check_keras_fit)(user, found, call_for(None))),
        ("special_points", lambda: general.not_elementwise(user, found)),
        ("vs_autodiff", lambda: guarded["vs_autodiff"](general.check_vs_autodiff)(user, found, call_for, values, spec.why)),
        ("saved_model", lambda: guarded["saved_model"](general.check_saved_model)(user, found, call_for(None))),
    )
    return _blame_shape(_run_plan(plan, time_limit))


def _not_checked(user: ops.user.UserFunction, found: general.Found) -> list[Check]:
    """Every row ``fail`` when no input assignment works: nothing checked is not a pass. ``shape_dtype`` says
    why (and how to declare the inputs); the others point there."""
    message = general.no_inputs_message(user, found)
    if found.backward_failures:
        why = "the backward raised on the inputs the forward accepts"
    elif message.startswith("the function cannot run"):
        why = "the function cannot run"
        message = f"not checked: {message}"
    else:
        why = f"no input shapes found that {user.name} accepts; declare them with input_shapes"
        message = f"not checked: {message}"
    return [
        _explain_fail(_result(name, "fail", message)) if name == "shape_dtype"
        else _result(name, "fail", f"not checked: {why} (see shape_dtype)")
        for name in FUNCTION_CHECKS
    ]


def _run_plan(plan: Sequence[tuple[str, Callable[[], Check]]], time_limit: float) -> list[Check]:
    """Each check in turn; after one overruns its time limit the rest are not run: each would wait as long
    again for the same hung call, and every abandoned worker keeps a core busy."""
    results: list[Check] = []
    timed_out = None
    for name, run in plan:
        if timed_out:
            results.append(_result(name, "warn", f"not run: the {timed_out} check timed out before it"))
            continue
        results.append(_explain_fail(run_limited(name, run, time_limit)))
        if results[-1].message.startswith("TimeoutError"):
            timed_out = name
    return results


def _required_arguments(layer_class: type) -> list[str]:
    """Constructor parameters without a default (``units`` of ``MyLayer(units)``)."""
    try:
        parameters = inspect.signature(layer_class).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in parameters if p.default is inspect.Parameter.empty and p.kind not in kinds]


def _blame_shape(results: list[Check]) -> list[Check]:
    """A gradient of the wrong shape breaks later checks with errors about arrays (IndexError, "Incompatible
    shapes") and makes the comparison with the true gradient meaningless: say so first, where a cut message
    still shows it. (A wrong dtype alone leaves the values comparable.)"""
    shape = next((result for result in results if result.name == "shape_dtype"), None)
    if shape is None or shape.passed or "has shape" not in shape.message:
        return results
    blamed = []
    for result in results:
        if result.name == "vs_autodiff" and result.passed:  # a pass or a warn: either compares wrong shapes
            result = _result(result.name, "warn", "not meaningful: the gradient has the wrong shape (see shape_dtype)")
        elif not result.passed and "raised" in result.message and "Fix:" not in result.message:
            result = _result(result.name, "fail", f"wrong gradient shape (fix shape_dtype first): {result.message}")
        blamed.append(result)
    return blamed


@contextlib.contextmanager
def _quiet_tensorflow():
    """TensorFlow logs a traceback when it cannot save a gradient, and warns about retracing: the checks say it."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("CRITICAL")
    try:
        yield
    finally:
        logger.setLevel(level)


def _explain_fail(result: Check) -> Check:
    """Add the fix for a known error ("keywords arguments only when eager", NumPy, gradient count)."""
    if result.passed or "Fix:" in result.message:
        return result
    hints = [hint for marker, hint in HINTS if marker in result.message]
    return result if not hints else _result(result.name, "fail", f"{result.message}. Fix: {hints[0]}")


# -- layer checks ----------------------------------------------------------------------------------------
def _registered(layer_class: type) -> bool:
    name = keras.saving.get_registered_name(layer_class)
    return keras.saving.get_registered_object(name) is layer_class


@_guarded("input_gradient")
def check_input_gradient(layer_class: type, functions: Sequence[tuple[str, Callable[..., Any]]]) -> Check:
    rng = np.random.default_rng(2)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    layer = layer_class()
    y, grad = value_and_grad(layer, x)
    if grad is None:
        return _result("input_gradient", "fail", "the layer's input gradient is None: no gradient reaches its input")
    output, gradient = y.numpy(), grad.numpy()
    same_output = []
    for name, fn in functions:
        try:
            fn_y, fn_grad = value_and_grad(fn, x)
        except Exception:  # noqa: BLE001 - a function that cannot take this input is not the one called
            continue
        if fn_y.shape == y.shape and np.allclose(fn_y.numpy(), output, **COMPARE_TOLERANCE):
            if fn_grad is not None and np.allclose(fn_grad.numpy(), gradient, **COMPARE_TOLERANCE):
                return _result(
                    "input_gradient",
                    "pass",
                    f"the input gradient equals the custom gradient of {name} on 32 inputs (the output matches it too)",
                )
            same_output.append((name, fn_grad))
    if same_output:
        name, fn_grad = same_output[0]
        gap = "None" if fn_grad is None else _fmt(float(np.max(np.abs(fn_grad.numpy() - gradient))))
        return _result(
            "input_gradient",
            "fail",
            f"the layer's output equals {name}'s but its input gradient does not (differs by up to {gap}): "
            f"the layer bypasses {name}'s custom gradient",
        )
    names = ", ".join(name for name, _ in functions) or "none found"
    return _result(
        "input_gradient",
        "warn",
        f"the layer's output matches none of the custom-gradient functions of its module ({names}), so its input "
        "gradient could not be compared; pass op=the_function to compare",
    )


@_guarded("keras_save")
def check_keras_save(layer_class: type) -> Check:
    rng = np.random.default_rng(3)
    x = tf.constant(rng.uniform(-2.0, 2.0, size=(8, 4)), tf.float32)
    inputs = keras.Input(shape=(4,))
    model = keras.Model(inputs, layer_class()(inputs))
    want_y, want_grad = value_and_grad(model, x)
    fix = (
        f"not registered: decorate {layer_class.__name__} with @keras.saving.register_keras_serializable() "
        "(and give it get_config if __init__ takes arguments)"
    )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.keras"
        model.save(path)
        try:
            loaded = keras.saving.load_model(path)
        except Exception as error:  # noqa: BLE001
            if not _registered(layer_class):
                first = _error_text(error).split(". ")[0]
                return _result("keras_save", "warn", f"{fix}; its .keras file does not load ({first})")
            return _result("keras_save", "fail", f"the .keras file does not load: {_error_text(error)}")
    got_y, got_grad = value_and_grad(loaded, x)
    if not np.allclose(got_y.numpy(), want_y.numpy(), **COMPARE_TOLERANCE):
        return _result("keras_save", "fail", "after .keras save and load the output differs")
    if (
        got_grad is None
        or want_grad is None
        or not np.allclose(got_grad.numpy(), want_grad.numpy(), **COMPARE_TOLERANCE)
    ):
        return _result("keras_save", "fail", "after .keras save and load the input gradient differs")
    registered = "" if _registered(layer_class) else f" (loaded here, but {fix})"
    return _result("keras_save", "pass", f".keras save and load: same output and input gradient{registered}")


def check_layer(
    layer_class: type,
    /,
    functions: Sequence[tuple[str, Callable[..., Any]]] | None = None,
    *,
    time_limit: float = TIME_LIMIT,
) -> list[Check]:
    """Run :data:`LAYER_CHECKS` on a ``keras.layers.Layer`` subclass built with no arguments.

    ``functions`` are the ``(name, fn)`` custom-gradient functions it may call (default: those its
    module defines), for ``input_gradient``.
    """
    if not (isinstance(layer_class, type) and issubclass(layer_class, keras.layers.Layer)):
        raise TypeError(f"expected a keras.layers.Layer subclass, got {layer_class!r}")
    if functions is None:
        from explorer.checker import discover

        module = discover.module_of(layer_class)
        functions = [(f.name, f.obj) for f in discover.members(module).functions] if module else []
    required = _required_arguments(layer_class)
    if required:  # the checks build the layer with no arguments
        message = (
            f"not checked: {layer_class.__name__}() needs the constructor argument(s) {', '.join(required)}; give "
            "them defaults, or check the function it calls with assert_custom_gradient(fn)"
        )
        return [_result(name, "fail", message) for name in LAYER_CHECKS]
    plan = (
        ("keras_fit", lambda: check_keras_fit(None, {}, layer=layer_class())),
        ("input_gradient", lambda: check_input_gradient(layer_class, functions)),
        ("keras_save", lambda: check_keras_save(layer_class)),
        ("saved_model", lambda: _guarded("saved_model")(_gradient_after_reload)("saved_model", layer_class)),
    )
    with _quiet_tensorflow():
        return _run_plan(plan, time_limit)
