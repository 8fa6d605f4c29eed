"""The checks of a function of one input, elementwise (a built-in op, an editor op, most surrogates): each on
the sweep of [-3, 3] (:data:`SWEEP_RANGE`, :data:`SWEEP_N` points, the declared special points on the grid) and
at each dtype's hard places (:func:`explorer.checker.common.hard_places`), the function called the way its
signature asks. :mod:`explorer.checker.checks` calls them for a :class:`~explorer.checker.common.Subject`
without input assignments; what each proves is in :data:`explorer.checker.plan.FUNCTION_PLAN`.

* ``finite``: a NaN forward or gradient, or an infinite gradient where the forward is finite, fails; a forward
  that overflows because its true value (the forward in float64) does not fit the dtype is only noted, and so is
  one at or beyond a declared ``singular`` point of that dtype (same side of 0). Where the float64 forward is
  NaN (outside the function's domain, e.g. ``log(sinh(x))`` for x < 0) nothing is counted.
* ``graph`` passes a value other than the default for every parameter, as the signature asks (by keyword where
  it says so: a keyword parameter under ``tf.function`` is the pitfall this finds).
* ``special_points``: without declared points the detected ones are listed (no failure); with declared points,
  one declared but absent or one detected but undeclared is a warning. An op that declares its surrogate must
  declare every point: one detected but undeclared fails.
* ``vs_autodiff``: a constant ratio is named ("half of autodiff"). Only a declared justification makes a
  difference intentional (a docstring is quoted as context); undeclared, a difference from an informative true
  gradient (finite, not zero, away from a jump or kink) warns, one where the true gradient is zero or missing (a
  step: a surrogate's reason to exist) passes and says so. A built-in's difference is intentional (its ``why``
  quoted); an editor op's difference warns.
* ``keras_fit`` and ``saved_model`` go through a Keras layer: ``ops.SurrogateLayer`` for an op that declares its
  surrogate, :class:`CallsYourFunction` for your function (inputs mapped into its domain for the fit).

Flags (a bool or string default) are checked at each value by ``finite``, ``shape_dtype`` and ``graph``
(:func:`at_each_flag`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ops
from explorer.checker import layer
from explorer.checker.common import (
    COMPARE_TOLERANCE,
    GRAPH_TOLERANCE,
    HARD_VALUES,
    RATIO_TOLERANCE,
    UPSTREAM,
    ZERO_GRADIENT,
    Check,
    Subject,
    explained,
    flag_text,
    fmt,
    guarded,
    hard_places,
    passed_text,
    result,
    undeclared_difference,
    value_and_grad,
    where,
)
from explorer.explore import detect
from explorer.explore.sweeps import Sweep, grid, sweep
from ops.inputs import error_text

SWEEP_RANGE = (-3.0, 3.0)
SWEEP_N = 2001
SHAPES: tuple[tuple[int, ...], ...] = ((), (7,), (4, 3, 5))
SHAPE_DTYPES = ("float16", "float32", "float64")
GRAPH_POINTS = 61
RATIO_WORDS = {0.5: "half of", 2.0: "twice", -1.0: "the negative of", 0.0: "zero times"}


def sweep_grid(spec: ops.OpSpec, params: Mapping[str, float], dtype: str = "float32", n: int = SWEEP_N) -> np.ndarray:
    """The sweep's x: ``n`` points of :data:`SWEEP_RANGE` plus the declared special points there."""
    lo, hi = SWEEP_RANGE
    x, _ = grid(lo, hi, n, dtype, spec.points(lo, hi, dtype, **params))
    return x


def sweep_of(subject: Subject) -> Sweep:
    """The subject's sweep of :data:`SWEEP_RANGE`, made once (``special_points`` and ``vs_autodiff`` share it)."""
    if "sweep" not in subject.cache:
        lo, hi = SWEEP_RANGE
        subject.cache["sweep"] = sweep(subject.spec, lo, hi, SWEEP_N, params=subject.params)
    return subject.cache["sweep"]


def at_each_flag(name: str, subject: Subject, check: Callable[[Subject, Mapping[str, Any] | None], Check]) -> Check:
    """``check`` at every flag setting (both values of a bool, a string's default): the first that does not
    pass, named by its flags; else the default's row, saying which values were checked."""
    settings = subject.user.flag_settings()
    if settings == [{}]:
        return check(subject, None)
    results = []
    for flags in settings:
        found = check(subject, flags)
        if found.level != "pass":
            return result(name, found.level, f"at {flag_text(flags)}: {found.message}")
        results.append(found)
    every = " and ".join(flag_text(flags) for flags in settings)
    return result(name, "pass", f"{results[0].message} (at {every})")


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


# -- finite ---------------------------------------------------------------------------------------------------
def _at(x: np.ndarray, sweep_size: int, mask: np.ndarray) -> str:
    """Where ``mask`` holds: runs on the first ``sweep_size`` (sorted sweep) points, then each hard place."""
    parts = [] if not mask[:sweep_size].any() else [where(x[:sweep_size], mask[:sweep_size])]
    on_sweep = set(x[:sweep_size][mask[:sweep_size]])  # 0 is both a sweep point and a hard place
    places = [fmt(value) for value in x[sweep_size:][mask[sweep_size:]] if value not in on_sweep]
    if places:
        parts.append("x = " + ", ".join(places))
    return ", ".join(parts)


def _float64_forward_on_grid(user: ops.user.UserFunction, x64: np.ndarray, params: Mapping[str, float], flags) -> np.ndarray:
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


def _finite_on_sweep(subject: Subject, flags: Mapping[str, Any] | None = None) -> Check:
    """Where the float64 forward itself is NaN (outside the function's domain) nothing is counted."""
    spec, params = subject.spec, subject.params
    user, call = subject.user, subject.call(flags)
    problems: list[str] = []
    notes: list[str] = []
    domain = np.zeros(0, bool)
    largest = 0.0
    sweep_x = sweep_grid(spec, params)
    for dtype in HARD_VALUES:
        x_values = np.asarray(hard_places(dtype), dtype=dtype)
        if dtype == "float32":
            x_values = np.concatenate([sweep_x, x_values]).astype(dtype)
        x = tf.constant(x_values)
        y, grad = value_and_grad(call, x)
        if grad is None:
            return result(
                "finite",
                "fail",
                f"the custom gradient is None ({dtype}): the backward returned None for x, so nothing upstream "
                "learns; return a tensor shaped like x, e.g. dy * g(x)",
            )
        x64 = x_values.astype(np.float64)
        forward = np.asarray(y.numpy(), dtype=np.float64)
        gradient = np.asarray(grad.numpy(), dtype=np.float64)
        if gradient.shape != x64.shape or forward.shape != x64.shape:
            return result(
                "finite",
                "fail",
                f"{dtype}: the gradient has shape {gradient.shape} and the output {forward.shape} for x of shape "
                f"{x64.shape} (see shape_dtype)",
            )
        located = functools.partial(_at, x64, sweep_x.size if dtype == "float32" else 0)
        outside = np.isnan(_float64_forward_on_grid(user, x64, {**spec.defaults(), **params}, flags))
        if dtype == "float32":
            domain = outside[: sweep_x.size]
        for what, values in (("forward", forward), ("gradient", gradient)):
            if (np.isnan(values) & ~outside).any():
                problems.append(f"{dtype}: the {what} is NaN at {located(np.isnan(values) & ~outside)}")
        gradient = np.where(outside, 0.0, gradient)
        inf_grad = np.isinf(gradient) & np.isfinite(forward)
        if inf_grad.any() and dtype != "float64":
            too_large = _gradient_too_large(call, x64[inf_grad], dtype)
            if too_large.any():
                notes.append(f"{dtype} gradient overflows where its float64 value does not fit {dtype}")
                inf_grad[np.flatnonzero(inf_grad)[too_large]] = False
        if inf_grad.any():
            problems.append(f"{dtype}: the gradient is infinite at {located(inf_grad)} where the forward is finite")
        overflow = np.isinf(forward) & ~outside
        documented = overflow & _beyond_singular_point(spec, params, x64, dtype)
        if documented.any():
            overflow &= ~documented
            notes.append(f"{dtype} forward overflows at {located(documented)}, documented by a declared singular point")
        if overflow.any():
            at = tf.constant(x64[overflow])
            true64 = user.forward_values(at, {**spec.defaults(), **params}, flags).numpy() if dtype != "float64" else None
            if true64 is None:
                notes.append(
                    f"float64 forward overflows at {located(overflow)} (no wider dtype to tell whether it should)"
                )
            else:
                fits = np.abs(true64) <= float(np.finfo(dtype).max)
                overflow_that_fits = np.zeros_like(overflow)
                overflow_that_fits[np.flatnonzero(overflow)[fits]] = True
                if fits.any():
                    problems.append(
                        f"{dtype}: the forward overflows to inf at {located(overflow_that_fits)} although its true "
                        f"value (float64: {fmt(float(true64[fits][0]))}) fits {dtype}"
                    )
                if (~fits).any():
                    notes.append(f"{dtype} forward overflows where its true value does not fit {dtype}")
        finite = gradient[np.isfinite(gradient)]
        if finite.size:
            largest = max(largest, float(np.abs(finite).max()))
    if problems:
        return result("finite", "fail", "; ".join(problems[:4]) + ". Use a stable formula (see RUNBOOK.md, NaN gradient)")
    lo, hi = SWEEP_RANGE
    if domain.any():
        notes.append(
            f"the float64 forward is NaN at {where(sweep_x.astype(np.float64), domain)} (outside the function's "
            "domain): not counted"
        )
    note = f"; noted: {'; '.join(notes)}" if notes else ""
    return result(
        "finite",
        "pass",
        f"finite on {sweep_x.size} points of [{lo:g}, {hi:g}] and at 0, +-tiny, +-1e4 and exp-overflow inputs "
        f"(float16 +-12, float32 +-100, float64 +-1000); max |g| = {fmt(largest)}{note}",
    )


finite_on_sweep = guarded("finite")(_finite_on_sweep)  # not a decorator: mutmut mutates only undecorated functions


# -- shape_dtype ----------------------------------------------------------------------------------------------
def _shape_words(shape: tuple[int, ...]) -> str:
    return "scalar" if len(shape) == 0 else f"shape {tuple(shape)}"


def _shape_dtype_of_shapes(subject: Subject, flags: Mapping[str, Any] | None = None) -> Check:
    """Output and gradient keep x's shape and dtype for each of :data:`SHAPE_DTYPES` and :data:`SHAPES`."""
    call = subject.call(flags)
    problems: list[str] = []
    rng = np.random.default_rng(0)
    for dtype in SHAPE_DTYPES:
        for shape in SHAPES:
            case = f"{dtype} {_shape_words(shape)}"
            values = rng.uniform(-2.0, 2.0, size=shape)
            if len(shape):
                values.flat[0] = 0.0  # a special point of most ops
            x = tf.constant(values, dtype=dtype)
            try:
                y, grad = value_and_grad(call, x)
            except Exception as error:  # noqa: BLE001
                problems.append(f"{case}: computing output and gradient raised {error_text(error)}")
                continue
            if grad is None:
                problems.append(f"{case}: gradient is None")
            for what, tensor in (("output", y), ("gradient", grad)):
                if tensor is None:
                    continue
                if tuple(tensor.shape) != shape:
                    problems.append(f"{case}: {what} has shape {tuple(tensor.shape)}")
                if tensor.dtype.name != dtype:
                    problems.append(f"{case}: {what} dtype is {tensor.dtype.name}")
    cases = len(SHAPE_DTYPES) * len(SHAPES)
    if problems:
        shown = "; ".join(problems[:2]) + (f"; and {len(problems) - 2} more" if len(problems) > 2 else "")
        return result(
            "shape_dtype",
            "fail",
            f"{shown}. Output and gradient must have x's shape and dtype (build the gradient as dy * g(x) "
            "from tensors of x's dtype; no reductions, no casts to another dtype)",
        )
    return result(
        "shape_dtype",
        "pass",
        f"shape and dtype kept in all {cases} cases ({', '.join(SHAPE_DTYPES)}; scalar, (7,), (4, 3, 5))",
    )


shape_dtype_of_shapes = guarded("shape_dtype")(_shape_dtype_of_shapes)  # not a decorator: mutmut mutates only undecorated functions


# -- graph ------------------------------------------------------------------------------------------------------
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


def _graph_differences(
    label: str, got: Mapping[str, tf.Tensor], expected: Mapping[str, np.ndarray], x_values: np.ndarray
) -> list[str]:
    """Where a compiled call's forward and gradient differ from eager (within :data:`GRAPH_TOLERANCE`)."""
    problems = []
    for what, tensor in got.items():
        values, want = tensor.numpy(), expected[what]
        close = np.isclose(values, want, equal_nan=True, **GRAPH_TOLERANCE)
        if not close.all():
            worst = int(np.argmax(np.where(close, 0.0, np.abs(np.nan_to_num(values - want, nan=np.inf)))))
            problems.append(
                f"{label} {what} differs from eager at {int((~close).sum())} points, e.g. x = {fmt(x_values[worst])}: "
                f"{fmt(values[worst])} vs {fmt(want[worst])}"
            )
    return problems


def _graph_on_sweep(subject: Subject, flags: Mapping[str, Any] | None = None) -> Check:
    """Eager, ``tf.function`` and ``jit_compile=True`` agree on :data:`GRAPH_POINTS` points of the sweep."""
    spec, params, user = subject.spec, subject.params, subject.user
    x_values = sweep_grid(spec, params, n=GRAPH_POINTS)
    x = tf.constant(x_values)
    used = _graph_values(spec, params)
    call = (lambda x: user.call(x, used, flags)) if used else subject.call(flags)
    upstream = tf.fill(tf.shape(x), tf.constant(UPSTREAM, x.dtype))
    passed = passed_text(user, used, flags)
    try:
        eager_y, eager_grad = value_and_grad(call, x, upstream)
    except Exception as error:  # noqa: BLE001
        return result("graph", "fail", f"eager call{passed} raised {explained(error)}")
    if eager_grad is None:
        return result("graph", "fail", "the eager custom gradient is None (see the 'finite' check)")
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
            problems.append(f"{label}{passed} raised {explained(error)}")
            break  # the same error again under XLA says nothing new
        problems += _graph_differences(label, {"forward": got_y, "gradient": got_grad}, expected, x_values)
    if problems:
        return result("graph", "fail", "; ".join(problems[:3]))
    return result(
        "graph",
        "pass",
        f"eager, tf.function and jit_compile=True agree on {x_values.size} points (forward and gradient, upstream "
        f"{UPSTREAM:g}){passed}",
    )


graph_on_sweep = guarded("graph")(_graph_on_sweep)  # not a decorator: mutmut mutates only undecorated functions


# -- keras_fit and saved_model, through a layer -------------------------------------------------------------
def _domain(subject: Subject) -> tuple[float, float] | None:
    """The longest run of the sweep grid where the float64 forward is not NaN, if it is NaN anywhere."""
    spec, params = subject.spec, subject.params
    x = sweep_grid(spec, params).astype(np.float64)
    outside = np.isnan(_float64_forward_on_grid(subject.user, x, {**spec.defaults(), **params}, None))
    if not outside.any() or outside.all():
        return None
    runs = detect.runs(~outside)
    start, end = max(runs, key=lambda r: r[1] - r[0])
    return float(x[start]), float(x[end])


def keras_fit_through_op(subject: Subject) -> Check:
    """One ``Model.fit`` step through ``ops.SurrogateLayer`` (an op that declares its surrogate: how Keras uses
    it) or a layer calling your function, its inputs mapped into the function's domain."""
    spec, params = subject.spec, subject.params
    if spec.declares_surrogate:
        return layer.keras_fit_through(ops.SurrogateLayer(spec, params=dict(params)))
    return layer.keras_fit_through(CallsYourFunction(subject.user, subject.given, domain=_domain(subject)))


def _true(spec: ops.OpSpec, params: Mapping[str, float], x: tf.Tensor) -> tf.Tensor:
    return spec.forward(x, **params)


def saved_model_through_op(subject: Subject) -> Check:
    """A built-in op through ``ops.SurrogateLayer``, your function through a layer that calls it."""
    spec, params = subject.spec, subject.params
    if spec.user_function is None:
        make_layer = functools.partial(ops.SurrogateLayer, spec, params=dict(params))
    else:
        make_layer = functools.partial(CallsYourFunction, spec.user_function, subject.given)
    return layer.saved_model_through(make_layer, functools.partial(_true, spec, params))


# -- special_points -----------------------------------------------------------------------------------------
def points_of(subject: Subject):
    """The special-points table of the subject's sweep (:func:`explorer.explore.points.special_points`), made once."""
    if "points" not in subject.cache:
        from explorer.explore.points import special_points

        subject.cache["points"] = special_points(sweep_of(subject))
    return subject.cache["points"]


JUMP_NOTE = (
    "; at a jump the custom value is the surrogate's design choice (no slope to lie between): the kink check "
    "judges kinks only"
)


def _special_points_on_sweep(subject: Subject) -> Check:
    """The message ends with :data:`JUMP_NOTE` where a jump of the forward is detected."""
    check = _special_points_verdict(subject)
    table = points_of(subject)
    if len(table) and ((table["kind"].astype(str) == "jump") & table["detected"].astype(bool)).any():
        return result(check.name, check.level, check.message + JUMP_NOTE)
    return check


special_points_on_sweep = guarded("special_points")(_special_points_on_sweep)  # not a decorator: mutmut mutates only undecorated functions


def _special_points_verdict(subject: Subject) -> Check:
    spec = subject.spec
    lo, hi = SWEEP_RANGE
    swept = sweep_of(subject)
    table = points_of(subject)
    status = table["status"].astype(str)

    def listing(rows, limit: int = 8) -> str:
        """Every jump and boundary (a surrogate's design choices, each worth a look), the other points up to
        ``limit`` in all, and how many more there are."""
        order = rows["kind"].astype(str).isin(["jump", "boundary"]).map({True: 0, False: 1})
        shown = rows.assign(_first=order.to_numpy()).sort_values(["_first", "x"], kind="stable")
        shown = shown[(shown["_first"] == 0) | (np.arange(len(shown)) < limit)].sort_values("x", kind="stable")
        more = len(rows) - len(shown)
        return ", ".join(f"x = {fmt(r.x)} ({r.kind})" for r in shown.itertuples()) + (
            f" and {more} more" if more else "")

    if len(table) == 0:
        return result("special_points", "pass", f"none declared, none detected in [{lo:g}, {hi:g}]")
    if not swept.declared_points and not spec.declares_surrogate:
        return result(
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
        return result(
            "special_points",
            "fail",
            f"{len(undeclared)} undeclared special point(s): {'; '.join(parts)}. An op that declares its forward and "
            "surrogate declares every point, so that the value AT the point is on the grid and documented",
        )
    if parts:
        return result("special_points", "warn", "; ".join(parts))
    return result(
        "special_points", "pass", f"all {int((status == 'ok').sum())} declared point(s) detected, none undeclared"
    )


# -- vs_autodiff ----------------------------------------------------------------------------------------------
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
            f"the custom gradient is {words} autodiff: {fmt(typical)} x {truth} on all {int(compared.sum())} "
            f"points of [{lo:g}, {hi:g}]"
        )
    gap = np.where(differs, np.abs(custom - true), 0.0)
    worst = int(np.argmax(gap))
    return (
        f"the custom gradient differs from {truth} by up to {fmt(gap[worst])} at x = {fmt(x[worst])} "
        f"(on {int(differs.sum())} of {x.size} points: {where(x, differs, limit=2)})"
    )


def near_special_points(subject: Subject, x: np.ndarray) -> np.ndarray:
    """Where x is a special point of the sweep (declared or detected: a jump or kink of the forward, a
    boundary of the custom gradient), within the matching tolerance of 1.5 grid steps: there the derivative
    is not defined and the value AT the point is a convention."""
    near = np.zeros(x.shape, bool)
    try:
        table = points_of(subject)
    except Exception:  # noqa: BLE001 - e.g. a gradient of the wrong shape: no point excuses a difference
        return near
    step = sweep_of(subject).grid_step
    for at in table["x"].to_numpy(dtype=np.float64):
        near |= np.abs(x - at) <= 1.5 * step
    return near


def _vs_autodiff_on_sweep(subject: Subject) -> Check:
    spec, params = subject.spec, subject.params
    lo, hi = SWEEP_RANGE
    df = sweep_of(subject).frame
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
            return result(
                "vs_autodiff",
                "fail",
                f"the declared forward differs from your function's forward at {where(x, wrong, limit=2)} "
                f"(e.g. x = {fmt(x[at])}: {fmt(declared[at])} vs {fmt(own[at])}), so its autodiff is not the "
                "true gradient of your function",
            )
    both = np.isfinite(true) & np.isfinite(custom)
    differs = both & ~np.isclose(custom, true, **COMPARE_TOLERANCE)
    outside = np.isnan(df["forward"].to_numpy(dtype=np.float64))
    if not both.any():  # nothing to compare is not agreement
        which = "the custom gradient" if not np.isfinite(custom).any() else truth
        return result("vs_autodiff", "warn", f"not meaningful: {which} is not finite anywhere on [{lo:g}, {hi:g}] (see finite)")
    true_bad = ~np.isfinite(true) & np.isfinite(custom) & ~outside
    parts = []
    if outside.any():
        parts.append(f"the forward is NaN at {where(x, outside)} (outside the function's domain): not compared")
    if true_bad.any():
        parts.append(f"{truth} is NaN/inf at {where(x, true_bad)} where the custom gradient is finite")
    if spec.declares_surrogate or spec.builtin or spec.why.strip():
        if not differs.any():
            summary = f"the custom gradient equals {truth} on all {int(both.sum())} finite points"
        else:
            summary = _difference_summary(x, custom, true, both, differs, truth)
        text = "; ".join([summary, *parts])
        # a built-in's why is its reviewed justification; an editor op's only says it was typed in
        if spec.declares_surrogate and not spec.builtin and (differs.any() or true_bad.any()):
            return result(
                "vs_autodiff",
                "warn",
                f"{text}. Intentional? A surrogate usually is: say why in the op's description, or fix the gradient",
            )
        if differs.any() or true_bad.any():
            return result("vs_autodiff", "pass", f"intentional: {text}. Why: {' '.join(spec.why.split())}")
        return result("vs_autodiff", "pass", text)
    # Undeclared: only an informative true gradient (finite, not zero, away from a jump or kink) that the
    # custom one differs from needs a declaration; where it is zero or missing (a step) a surrogate passes.
    if not differs.any():
        summary = f"the custom gradient equals {truth} on all {int(both.sum())} finite points"
        return result("vs_autodiff", "pass", "; ".join([summary, *parts]))
    near = near_special_points(subject, x)
    flat = differs & (np.abs(true) <= ZERO_GRADIENT)
    informative = differs & ~flat & ~near
    if informative.any():
        summary = _difference_summary(x, custom, true, both & ~near, informative, truth)
        return result(
            "vs_autodiff", "warn", f"{'; '.join([summary, *parts])}. {undeclared_difference(spec.user_function, spec.key)}"
        )
    found = []
    if flat.any():
        none = " (autodiff of the forward gives None)" if bool(df["true_grad_missing"].iloc[0]) else ""
        found.append(
            f"{truth} is 0{none} at {where(x, flat)} where the custom gradient is not: the forward is flat there"
        )
    at_points = differs & near & ~flat
    if at_points.any():
        found.append(
            f"at {where(x, at_points)}, a jump or kink of the forward, the derivative is not defined (the custom "
            "value there is a convention)"
        )
    agree = int((both & ~differs).sum())
    start = "a surrogate: the custom gradient lets a gradient through where the true one is zero or missing" if (
        flat.any() or true_bad.any()
    ) else f"the custom gradient equals {truth} on {agree} of {int(both.sum())} finite points"
    return result("vs_autodiff", "pass", "; ".join([start, *found, *parts]))


vs_autodiff_on_sweep = guarded("vs_autodiff")(_vs_autodiff_on_sweep)  # not a decorator: mutmut mutates only undecorated functions


# -- kink -----------------------------------------------------------------------------------------------------
KINK_STEPS = {"float64": (1e-4, 1e-6), "float32": (1e-2, 1e-3)}  # one-sided slopes at h, and h' for continuity
KINK_TOLERANCE = {"float64": 1e-4, "float32": 2e-2}  # relative to the larger slope (at least 1)


def one_sided(call: Callable[[tf.Tensor], tf.Tensor], at: float, dtype: str, gap: float = np.inf) -> dict[str, float]:
    """At ``at``: the forward's one-sided slopes (step h, under half the ``gap`` to the next special point),
    whether it is continuous there (its one-sided changes shrink with the step, as they do at a kink and not at
    a jump), the custom gradient AT the point and its one-sided limits (step h)."""
    h, small = KINK_STEPS[dtype]
    if gap / 2 < h:  # declared points closer than the step (safe_norm's 0 and +-1e-12): stay between them
        h = max(gap / 2, 1e-12 if dtype == "float64" else 1e-5)
        small = h / 100
    x = tf.constant(np.array([at - h, at, at + h, at - small, at + small]), dtype)
    y, grad = value_and_grad(call, x)
    f, g = np.asarray(y.numpy(), np.float64), np.asarray(grad.numpy(), np.float64)
    moved = x.numpy().astype(np.float64) - float(x.numpy()[1])
    change = max(abs(f[3] - f[1]), abs(f[4] - f[1]))
    wide = max(abs(f[0] - f[1]), abs(f[2] - f[1]))
    return {
        "left": (f[1] - f[0]) / -moved[0],
        "right": (f[2] - f[1]) / moved[2],
        "continuous": bool(change <= 0.5 * wide or change <= 1e3 * np.finfo(dtype).eps * max(1.0, abs(f[1]))),
        "value": g[1],
        "custom_left": g[0],
        "custom_right": g[2],
    }


def _kink_on_sweep(subject: Subject) -> Check:
    """At each special point of the sweep (declared or detected) where the forward is continuous and its
    one-sided slopes differ, the custom value must lie in [min, max] of the slopes (a subgradient's convention,
    endpoints included); where the custom gradient's own one-sided limits are not the forward's slopes (a
    surrogate around the point) the interval spans those too. Jumps are not judged: there the value is a design
    choice (special_points lists them)."""
    call = subject.call(None)
    table = points_of(subject)
    try:
        value_and_grad(call, tf.constant([0.0], tf.float64))
        dtype = "float64"
    except Exception:  # noqa: BLE001 - a function that does not run in float64
        dtype = "float32"
    judged, jumps, outside = [], 0, []
    points = sorted(set(table["x"].to_numpy(dtype=np.float64))) if len(table) else []
    for index, at in enumerate(points):
        gap = min([abs(at - other) for other in (points[index - 1 : index] + points[index + 1 : index + 2])] or [np.inf])
        sides = one_sided(call, float(at), dtype, gap)
        if not all(np.isfinite([sides[k] for k in ("left", "right", "value")])):
            continue
        if not sides["continuous"]:
            jumps += 1
            continue
        scale = max(1.0, abs(sides["left"]), abs(sides["right"]))
        tolerance = KINK_TOLERANCE[dtype] * scale
        if abs(sides["left"] - sides["right"]) <= tolerance:
            continue  # no kink of the forward here (a boundary or kink of the custom gradient only)
        ends = [sides["left"], sides["right"]]
        surrogate = ""
        limits = [sides["custom_left"], sides["custom_right"]]
        if not all(np.isclose(limits, ends, rtol=0.0, atol=tolerance)) and np.isfinite(limits).all():
            ends += limits
            surrogate = f", widened by the custom gradient's own one-sided limits {fmt(limits[0])} and {fmt(limits[1])}"
        low, high = min(ends), max(ends)
        text = (
            f"x = {fmt(at)}: slopes {fmt(sides['left'])} (left) and {fmt(sides['right'])} (right), custom value "
            f"{fmt(sides['value'])}"
        )
        judged.append(text)
        if not low - tolerance <= sides["value"] <= high + tolerance:
            outside.append(f"{text}, outside [{fmt(low)}, {fmt(high)}]{surrogate}")
    jump_note = (
        f"; {jumps} jump(s) of the forward not judged (there the value is a design choice, see special_points)"
        if jumps else ""
    )
    if outside:
        return result(
            "kink",
            "fail",
            f"the custom gradient AT a kink of the forward is not between its one-sided slopes: {'; '.join(outside[:3])}. "
            "A sound convention is a subgradient, a value in [min, max] of the slopes (|x| at 0: in [-1, 1]; ReLU at "
            f"0: in [0, 1]): return one there (e.g. tf.where(x == 0, 0.0, ...)){jump_note}",
        )
    if not judged:
        return result("kink", "pass", f"no kink of the forward among the special points of [{SWEEP_RANGE[0]:g}, {SWEEP_RANGE[1]:g}]{jump_note}")
    return result(
        "kink",
        "pass",
        f"the custom value at every kink of the forward lies between its one-sided slopes: {'; '.join(judged[:3])}{jump_note}",
    )


kink_on_sweep = guarded("kink")(_kink_on_sweep)  # not a decorator: mutmut mutates only undecorated functions
