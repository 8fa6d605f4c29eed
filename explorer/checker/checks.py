"""The gradient checker's record (:class:`Check`) and the checks of an op that declares its forward,
surrogate and special points (a built-in, an editor op). :func:`explorer.checker.runner.check` runs them,
with ``saved_model`` (:mod:`explorer.checker.user`) as the seventh, through the same plan as your own
functions:

1. ``finite``: the custom gradient exists (is not None) and is finite on the sweep grid of [-3, 3]
   (2001 points plus every declared special point, float32);
2. ``shape_dtype``: output and gradient keep the input's shape and dtype for float16, float32 and
   float64 inputs, on a scalar, a vector and a (4, 3, 5) tensor;
3. ``graph``: eager, ``tf.function`` and ``tf.function(jit_compile=True)`` give the same forward and
   gradient, and a new parameter value does not retrace the compiled function;
4. ``keras_fit``: a small Keras model with ``ops.SurrogateLayer`` trains one ``Model.fit`` step with a
   finite loss (warns if no gradient reaches the layer before the op);
5. ``special_points``: the declared special points match the detected ones (an undeclared point
   fails; a declared point that is not detected is a warning);
6. ``vs_autodiff``: where the custom gradient differs from autodiff of the forward, say so: for a
   built-in op that is intentional (the message quotes its ``why``, level "pass"). Ops from your own
   code (``ops.from_function``) and Keras layers get the checks of :mod:`explorer.checker.user` instead.

Each :class:`Check` has a ``level``: ``"pass"``, ``"warn"`` (worth a look, not an error) or
``"fail"``; ``passed`` is ``level != "fail"``. A check never raises: an exception inside it (a
gradient of the wrong dtype, a forward that cannot be traced) becomes a failed check whose message
names the exception. :func:`check` itself raises only for a bad argument (KeyError for an unknown op
key, ValueError for a parameter outside its range).

Your own code: an op from :func:`ops.from_function` gets the checks of :mod:`explorer.checker.user`
(seven, run on your function itself), and ``python -m explorer verify TARGET ...`` checks every
custom-gradient function and Keras layer found in a file, directory or module (:func:`check_targets`).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

import ops
from explorer.explore import detect
from explorer.explore.sweeps import Sweep, grid, sweep

LEVELS = ("pass", "warn", "fail")
CHECKS: dict[str, str] = {
    "finite": "the custom gradient exists and is finite over the sweep",
    "shape_dtype": "output and gradient keep the input's shape and dtype (float16/32/64)",
    "graph": "eager, tf.function and jit_compile=True agree; no retracing on a new parameter value",
    "keras_fit": "a Keras model with SurrogateLayer trains one Model.fit step with a finite loss",
    "special_points": "declared special points match the detected ones",
    "vs_autodiff": "where the custom gradient differs from autodiff, the difference is explained",
    "saved_model": "model.export + tf.saved_model.load keeps the custom gradient",
}
SWEEP_RANGE = (-3.0, 3.0)
SWEEP_N = 2001
SHAPES: tuple[tuple[int, ...], ...] = ((), (7,), (4, 3, 5))
SHAPE_DTYPES = ("float16", "float32", "float64")
UPSTREAM = 1.5  # the graph check uses an upstream gradient != 1, so ops acting on dy are exercised
GRAPH_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # XLA may fuse transcendental ops differently
AUTODIFF_TOLERANCE = {"rtol": 1e-4, "atol": 1e-6}
# In a clone, the repository's verification/ folder; installed from a wheel, ./verification (never site-packages).
_CLONE = Path(__file__).resolve().parent.parent
VERIFICATION_DIR = _CLONE / "verification" if (_CLONE / "pyproject.toml").exists() else Path("verification")


@dataclass(frozen=True)
class Check:
    """One check's result. ``level`` is "pass", "warn" or "fail"; ``passed`` is ``level != "fail"``."""

    name: str
    passed: bool
    message: str
    level: str = "pass"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {self.level!r}")
        if self.passed != (self.level != "fail"):
            raise ValueError(f"passed={self.passed} contradicts level={self.level!r}")


def _result(name: str, level: str, message: str) -> Check:
    return Check(name=name, passed=level != "fail", message=message, level=level)


def _error_text(error: BaseException) -> str:
    """``Type: message`` on one line; of a traced error ("in user code: File ..."), its last line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "in user code" in lines[0] else " ".join(lines)
    # TensorFlow's eager op errors: "{{function_node __wrapped__MatMul_device_/job:...}} <message> [Op:MatMul] name: "
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:(\w+)\](\s*name:\s*\S*)?\s*$", r" (op \1)", text)
    if len(text) > 300:
        text = text[:297] + "..."
    name = type(error).__name__
    return text if text.startswith(f"{name}:") else f"{name}: {text}" if text else name


def _guarded(name: str) -> Callable[[Callable[..., Check]], Callable[..., Check]]:
    """Turn any exception raised by a check into a failed :class:`Check` naming it."""

    def decorate(function: Callable[..., Check]) -> Callable[..., Check]:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Check:
            try:
                return function(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - a check reports, it never raises
                return _result(name, "fail", f"the check raised {_error_text(error)}")

        return run

    return decorate


# -- helpers -----------------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _where(x: np.ndarray, mask: np.ndarray, limit: int = 3) -> str:
    """Where ``mask`` holds on the sorted grid ``x``, as runs: "x in [-3, -0.003] (1000 points), x = 0"."""
    found = detect.runs(mask)
    if not found:
        return "nowhere"
    parts = []
    for start, end in found[:limit]:
        if start == end:
            parts.append(f"x = {_fmt(x[start])}")
        else:
            parts.append(f"x in [{_fmt(x[start])}, {_fmt(x[end])}] ({end - start + 1} points)")
    if len(found) > limit:
        parts.append(f"and {len(found) - limit} more run(s)")
    return ", ".join(parts)


def _grid(spec: ops.OpSpec, params: Mapping[str, float], dtype: str = "float32", n: int = SWEEP_N) -> np.ndarray:
    lo, hi = SWEEP_RANGE
    x, _ = grid(lo, hi, n, dtype, spec.points(lo, hi, dtype, **params))
    return x


def value_and_grad(call: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor, upstream: Any = None):
    """``call(x)`` and its gradient with respect to x (None if the backward gives none)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = call(x)
    return y, tape.gradient(y, x, output_gradients=upstream)


def _apply(spec: ops.OpSpec, x: tf.Tensor, params: Mapping[str, Any]) -> tf.Tensor:
    return spec.apply(x, **params)


def _custom_value_and_grad(spec: ops.OpSpec, x: tf.Tensor, params: Mapping[str, Any], upstream: Any = None):
    return value_and_grad(functools.partial(_apply, spec, params=params), x, upstream)


def _shape_text(shape: Sequence[int]) -> str:
    return "scalar" if len(shape) == 0 else f"shape {tuple(shape)}"


# -- the six checks -------------------------------------------------------------------------------------
@_guarded("finite")
def check_finite(spec: ops.OpSpec, params: Mapping[str, float]) -> Check:
    x_values = _grid(spec, params)
    x = tf.constant(x_values)
    _, grad = _custom_value_and_grad(spec, x, params)
    where_range = f"[{SWEEP_RANGE[0]:g}, {SWEEP_RANGE[1]:g}]"
    if grad is None:
        return _result(
            "finite",
            "fail",
            "the custom gradient is None: the gradient function returned None for x, so nothing upstream learns "
            "(return a tensor shaped like x, e.g. dy * g(x))",
        )
    values = grad.numpy().astype(np.float64)
    if values.shape != x_values.shape:
        return _result(
            "finite", "fail", f"the custom gradient has shape {values.shape}, expected {x_values.shape} (like x)"
        )
    bad = ~np.isfinite(values)
    if bad.any():
        kinds = (("NaN", np.isnan(values)), ("+inf", values == np.inf), ("-inf", values == -np.inf))
        places = "; ".join(f"{what} at {_where(x_values, mask)}" for what, mask in kinds if mask.any())
        return _result(
            "finite",
            "fail",
            f"the custom gradient is not finite at {int(bad.sum())} of {values.size} points of {where_range}: {places}",
        )
    return _result(
        "finite",
        "pass",
        f"finite at all {values.size} points of {where_range} (float32), max |g| = {_fmt(np.abs(values).max())}",
    )


@_guarded("shape_dtype")
def check_shape_dtype(
    spec: ops.OpSpec, params: Mapping[str, float], call: Callable[[tf.Tensor], tf.Tensor] | None = None
) -> Check:
    """``call(x) -> y`` is what is checked (default ``spec.apply`` at ``params``)."""
    if call is None:
        call = functools.partial(_apply, spec, params=params)
    problems: list[str] = []
    rng = np.random.default_rng(0)
    for dtype in SHAPE_DTYPES:
        for shape in SHAPES:
            where = f"{dtype} {_shape_text(shape)}"
            values = rng.uniform(-2.0, 2.0, size=shape)
            if len(shape):
                values.flat[0] = 0.0  # a special point of most ops
            x = tf.constant(values, dtype=dtype)
            try:
                y, grad = value_and_grad(call, x)
            except Exception as error:  # noqa: BLE001
                problems.append(f"{where}: computing output and gradient raised {_error_text(error)}")
                continue
            if grad is None:
                problems.append(f"{where}: gradient is None")
            for what, tensor in (("output", y), ("gradient", grad)):
                if tensor is None:
                    continue
                if tuple(tensor.shape) != shape:
                    problems.append(f"{where}: {what} has shape {tuple(tensor.shape)}")
                if tensor.dtype.name != dtype:
                    problems.append(f"{where}: {what} dtype is {tensor.dtype.name}")
    cases = len(SHAPE_DTYPES) * len(SHAPES)
    if problems:
        shown = "; ".join(problems[:2]) + (f"; and {len(problems) - 2} more" if len(problems) > 2 else "")
        return _result(
            "shape_dtype",
            "fail",
            f"{shown}. Output and gradient must have x's shape and dtype (build the gradient as dy * g(x) "
            "from tensors of x's dtype; no reductions, no casts to another dtype)",
        )
    return _result(
        "shape_dtype",
        "pass",
        f"shape and dtype kept in all {cases} cases ({', '.join(SHAPE_DTYPES)}; scalar, (7,), (4, 3, 5))",
    )


def _graph_function(spec: ops.OpSpec, jit_compile: bool):
    names = spec.param_names

    @tf.function(jit_compile=jit_compile, reduce_retracing=True)
    def forward_and_gradient(x, *param_values):
        params = dict(zip(names, param_values, strict=True))
        dy = tf.fill(tf.shape(x), tf.constant(UPSTREAM, x.dtype))
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec.apply(x, **params)
        grad = tape.gradient(y, x, output_gradients=dy)
        return y, (tf.fill(tf.shape(x), tf.constant(np.nan, x.dtype)) if grad is None else grad)

    return forward_and_gradient


def _other_values(spec: ops.OpSpec, params: Mapping[str, float]) -> dict[str, float]:
    """Different valid parameter values (half-way to the upper end), to see whether a call retraces."""
    other = {}
    for param in spec.params:
        value = (params[param.name] + param.high) / 2.0
        other[param.name] = float(round(value)) if param.integer else value
    return other


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
                f"{label} {what} differs from eager at {int((~close).sum())} points, e.g. x = {_fmt(x_values[worst])}: "
                f"{_fmt(values[worst])} vs {_fmt(want[worst])}"
            )
    return problems


@_guarded("graph")
def check_graph(spec: ops.OpSpec, params: Mapping[str, float]) -> Check:
    x_values = _grid(spec, params, n=61)
    x = tf.constant(x_values)
    eager_y, eager_grad = _custom_value_and_grad(spec, x, params, tf.fill(tf.shape(x), tf.constant(UPSTREAM, x.dtype)))
    if eager_grad is None:
        return _result("graph", "fail", "the eager custom gradient is None (see the 'finite' check)")
    expected = {"forward": eager_y.numpy(), "gradient": eager_grad.numpy()}
    problems: list[str] = []
    retraced: list[str] = []
    for label, jit in (("tf.function", False), ("jit_compile=True", True)):
        function = _graph_function(spec, jit)
        tensors = [tf.constant(params[name], x.dtype) for name in spec.param_names]
        try:
            got_y, got_grad = function(x, *tensors)
        except Exception as error:  # noqa: BLE001
            problems.append(f"{label} raised {_error_text(error)}")
            continue
        problems += _graph_differences(label, {"forward": got_y, "gradient": got_grad}, expected, x_values)
        if spec.params:
            other = _other_values(spec, params)
            function(x, *[tf.constant(other[name], x.dtype) for name in spec.param_names])
            traces = function.experimental_get_tracing_count()
            if traces > 1:
                retraced.append(f"{label} traced {traces} times for two parameter values")
    if problems:
        return _result("graph", "fail", "; ".join(problems[:3]))
    if retraced:
        return _result(
            "graph",
            "warn",
            "values agree, but " + "; ".join(retraced) + ": pass parameters as tensors, positionally",
        )
    return _result(
        "graph",
        "pass",
        f"eager, tf.function and jit_compile=True agree on {x_values.size} points (forward and gradient, upstream "
        f"{UPSTREAM:g})" + ("; no retrace for a new parameter value" if spec.params else ""),
    )


@_guarded("keras_fit")
def check_keras_fit(spec: ops.OpSpec | None, params: Mapping[str, float], layer: Any = None) -> Check:
    """``layer`` (a Keras layer) is what is trained, default ``ops.SurrogateLayer(spec, params)``."""
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    features = rng.normal(size=(32, 4)).astype("float32")
    targets = rng.normal(size=(32, 1)).astype("float32")
    before = keras.layers.Dense(4, name="before_op")
    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            before,
            ops.SurrogateLayer(spec, params=dict(params)) if layer is None else layer,
            keras.layers.Dense(1),
        ]
    )
    # no XLA here: the graph check covers jit_compile, and compiling the train step with it costs seconds
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse", jit_compile=False)
    start = [w.copy() for w in before.get_weights()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(features, targets, batch_size=32, epochs=1, verbose=0)
    keras_said = [str(w.message) for w in caught if "Gradients do not exist" in str(w.message)]
    loss = float(history.history["loss"][-1])
    if not np.isfinite(loss):
        return _result("keras_fit", "fail", f"Model.fit ran but the loss is {loss}")
    moved = any(not np.array_equal(a, b) for a, b in zip(start, before.get_weights(), strict=True))
    if not moved:
        return _result(
            "keras_fit",
            "warn",
            f"one Model.fit step ran (loss {_fmt(loss)}), but the Dense layer before the op did not move: "
            "no gradient flows back through the op at these parameters"
            + (" (Keras: gradients do not exist for its variables)" if keras_said else ""),
        )
    return _result(
        "keras_fit", "pass", f"one Model.fit step: loss {_fmt(loss)} (finite); the layer before the op moved"
    )


@_guarded("special_points")
def check_special_points(spec: ops.OpSpec, params: Mapping[str, float], result: Sweep | None = None) -> Check:
    from explorer.explore.points import special_points

    lo, hi = SWEEP_RANGE
    result = sweep(spec, lo, hi, SWEEP_N, params=params) if result is None else result
    table = special_points(result)
    if len(table) == 0:
        return _result("special_points", "pass", f"no special points declared or detected in [{lo:g}, {hi:g}]")
    status = table["status"].astype(str)
    undeclared = table[status == "undeclared"]
    missing = table[status == "not detected"]

    def listing(rows: pd.DataFrame) -> str:
        return ", ".join(f"x = {_fmt(r.x)} ({r.kind})" for r in rows.head(4).itertuples())

    ok = int((status == "ok").sum())
    if len(undeclared):
        extra = f"; declared but not detected: {listing(missing)}" if len(missing) else ""
        return _result(
            "special_points",
            "fail",
            f"{len(undeclared)} undeclared special point(s): {listing(undeclared)}{extra}. Declare them so that the "
            "value AT the point is on the grid and documented",
        )
    if len(missing):
        return _result(
            "special_points",
            "warn",
            f"{ok} declared point(s) detected; {len(missing)} declared but not detected in the sweep: {listing(missing)}",
        )
    return _result("special_points", "pass", f"all {ok} declared special point(s) detected, none undeclared")


@_guarded("vs_autodiff")
def check_vs_autodiff(spec: ops.OpSpec, params: Mapping[str, float], result: Sweep | None = None) -> Check:
    lo, hi = SWEEP_RANGE
    df = (sweep(spec, lo, hi, SWEEP_N, params=params) if result is None else result).frame
    x = df["x"].to_numpy()
    custom = df["custom_grad"].to_numpy()
    true = df["true_grad"].to_numpy()
    missing = bool(df["true_grad_missing"].iloc[0]) if len(df) else False
    notes = []
    if missing:
        notes.append("autodiff of the forward returns no gradient (None), counted as 0")
    true_bad = ~np.isfinite(true) & np.isfinite(custom)
    if true_bad.any():
        notes.append(f"autodiff is NaN/inf at {_where(x, true_bad)} where the custom gradient is finite")
    both = np.isfinite(true) & np.isfinite(custom)
    differs = both & ~np.isclose(custom, true, **AUTODIFF_TOLERANCE)
    if not differs.any() and not true_bad.any():
        extra = f" ({notes[0]})" if notes else ""
        return _result("vs_autodiff", "pass", f"the custom gradient equals autodiff on all {x.size} points{extra}")
    parts = list(notes)
    if differs.any():
        gap = np.where(differs, np.abs(custom - true), 0.0)
        worst = int(np.argmax(gap))
        parts.insert(
            0,
            f"differs from autodiff by up to {_fmt(gap[worst])} at x = {_fmt(x[worst])} "
            f"(on {int(differs.sum())} of {x.size} points: {_where(x, differs, limit=2)})",
        )
    summary = "; ".join(parts)
    if spec.builtin:
        return _result("vs_autodiff", "pass", f"intentional: {summary}. Why: {spec.why}")
    return _result(
        "vs_autodiff",
        "warn",
        f"{summary}. Intentional? A surrogate usually is: say why in the op's description, or fix the gradient",
    )
