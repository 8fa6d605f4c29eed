"""Pinned gradients: ``assert_custom_gradient(fn, snapshot="tests/snapshots/fn.json")``.

The checks test properties (finite, shapes, graph mode, ...); a backward whose *values* change after a
TensorFlow upgrade or a refactor passes them all. A snapshot pins the values:

* missing file: the forward and the custom gradient (upstream ``dy = 1``) are recorded on the snapshot grid,
  :data:`SNAPSHOT_N` points of :data:`SNAPSHOT_RANGE` plus every declared special point, in each dtype of
  :data:`ops.DTYPES` the function runs in (a Keras layer: float32, the layer built with no arguments after
  ``keras.utils.set_random_seed(0)``); the check passes with a warning. With ``CI`` set to true a missing
  file fails instead: a snapshot is recorded on a developer's machine and committed, never in CI;
* present: the function is evaluated again at the recorded x and each value compared within its dtype's
  tolerance (:data:`RELATIVE_TOLERANCE`, relative to the recorded value, plus one rounding unit of the
  column's largest value so that noise around zero is not a change). Every changed value is listed; a
  1 % change of the gradient fails in float16, float32 and float64 (bfloat16's 8 bits allow one unit, 0.78 %);
* ``GRADIENT_EXPLORER_UPDATE_SNAPSHOTS=1``, or ``pytest --update-snapshots``
  (:mod:`explorer.checker.pytest_plugin`), re-records an existing file (after an intended change).

The file records the TensorFlow, Keras and NumPy versions it was made with; a failure names them and the
ones in use. It is small and diff-friendly: one line per dtype, each number written with the fewest digits
that give back the same value in that dtype (``nan``, ``inf`` and ``-inf`` as strings).

``python -m explorer verify --record`` is another thing: a dated record of the checker's verdicts on this
machine, for people; a snapshot is a test fixture that fails when the numbers move.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

import ops
from explorer.checker.common import Check, GradientCheckWarning, result
from explorer.checker.pytest_plugin import UPDATE_VARIABLE
from explorer.checker.timelimit import TimeLimitExceeded, call_with_time_limit
from explorer.explore.sweeps import grid, numpy_dtype
from ops.inputs import error_text

SNAPSHOT_RANGE = (-3.0, 3.0)
SNAPSHOT_N = 61  # a step of 0.1
# Relative tolerance per dtype: about one unit in the last place (float16, bfloat16), well above the few
# units a new kernel of exp or tanh may move a float32 result, and rounding noise for float64.
RELATIVE_TOLERANCE = {"float16": 1e-3, "bfloat16": 2.0**-7, "float32": 1e-5, "float64": 1e-10}
VERSIONED = {"tensorflow": "TensorFlow", "keras": "Keras", "numpy": "NumPy"}
VALUES = ("forward", "gradient")
LISTED = 12  # changed values listed in a failure; the rest are counted
TIME_LIMIT = 120.0
_TRUE = ("1", "true", "yes", "on")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def ci_and_update_flags() -> tuple[bool, bool]:
    """``(CI is true, re-recording asked for)`` as this process's environment says now."""
    return _flag("CI"), _flag(UPDATE_VARIABLE)


def versions() -> dict[str, str]:
    """The versions a snapshot records, by distribution name."""
    found = {}
    for package in VERSIONED:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def _versions_text(made_with: Mapping[str, str]) -> str:
    return ", ".join(f"{label} {made_with.get(package, '?')}" for package, label in VERSIONED.items())


# -- numbers as text ---------------------------------------------------------------------------------------
def number_text(value: float, dtype: str) -> str:
    """The shortest decimal that gives back ``value`` in ``dtype`` (JSON number), or "nan"/"inf"/"-inf" quoted."""
    value = float(value)
    if not np.isfinite(value):
        return json.dumps("nan" if np.isnan(value) else "inf" if value > 0 else "-inf")
    kind = numpy_dtype(dtype).type
    target = kind(value)
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if kind(float(text)) == target:
            return text
    return repr(value)


def _line(values: np.ndarray, dtype: str) -> str:
    return "[" + ", ".join(number_text(v, dtype) for v in values.tolist()) + "]"


def dumps(record: Mapping[str, Any]) -> str:
    """The snapshot file's text: header fields one per line, then one line per dtype."""
    lines = ["{"]
    for key in ("function", "about", "made_with", "params", "upstream"):
        lines.append(f"  {json.dumps(key)}: {json.dumps(record[key], sort_keys=True)},")
    rows = []
    for dtype, columns in record["values"].items():
        parts = ", ".join(f'"{name}": {_line(np.asarray(columns[name], np.float64), dtype)}' for name in ("x", *VALUES))
        rows.append(f"    {json.dumps(dtype)}: {{{parts}}}")
    lines += ['  "values": {', ",\n".join(rows), "  }", "}"]
    return "\n".join(lines) + "\n"


def loads(text: str) -> dict[str, Any]:
    """A snapshot's record, its columns as float64 arrays; ValueError for anything else."""
    record = json.loads(text)
    for dtype, columns in record["values"].items():
        if dtype not in RELATIVE_TOLERANCE:
            raise ValueError(f"unknown dtype {dtype!r}; a snapshot holds {', '.join(RELATIVE_TOLERANCE)}")
        for name in ("x", *VALUES):
            columns[name] = np.asarray([float(v) for v in columns[name]], np.float64)  # float("nan") etc.
        if not len(columns["x"]) == len(columns["forward"]) == len(columns["gradient"]):
            raise ValueError(f"{dtype}: x, forward and gradient differ in length")
    return record


# -- evaluating the function ---------------------------------------------------------------------------------
def _callable(fn_or_layer: Any, params: Mapping[str, float] | None, declarations: Mapping[str, Any]):
    """``(name, call, points, dtypes)``: call(x) -> y whose gradient is pinned, the declared points per dtype,
    and the dtypes to try."""
    import keras

    if isinstance(fn_or_layer, type) and issubclass(fn_or_layer, keras.layers.Layer):
        python_state, numpy_state = random.getstate(), np.random.get_state()
        try:
            keras.utils.set_random_seed(0)
            layer = fn_or_layer()
            layer(tf.zeros((1, 1)))
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)

        def through_layer(x):
            return tf.reshape(layer(tf.reshape(x, (-1, 1))), tf.shape(x))

        return fn_or_layer.__name__, through_layer, lambda dtype: [], ("float32",)
    wanted = ("forward", "points", "ranges", "title", "justification")
    spec = ops.from_function(fn_or_layer, **{k: v for k, v in declarations.items() if k in wanted})
    resolved = spec.resolve(params)
    defaults = spec.defaults()
    changed = {name: value for name, value in resolved.items() if value != defaults[name]}
    user = spec.user_function
    lo, hi = SNAPSHOT_RANGE

    def call(x):
        return user.call(x, changed)  # positional-only parameters are always passed, as the signature asks

    def points(dtype: str) -> list[ops.Point]:
        return spec.points(lo, hi, dtype, **resolved)

    return spec.key, call, points, ops.DTYPES


def _evaluate(call: Callable[[tf.Tensor], tf.Tensor], x: np.ndarray, dtype: str) -> dict[str, np.ndarray]:
    """Forward and gradient (dy = 1) at ``x`` in ``dtype``, as float64 arrays; raises if either is missing."""
    tensor = tf.constant(np.asarray(x, np.float64).astype(numpy_dtype(dtype)))
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        y = call(tensor)
    gradient = tape.gradient(y, tensor, output_gradients=tf.ones_like(y))
    if gradient is None:
        raise ValueError("the custom gradient is None")
    forward = np.asarray(tf.cast(y, tf.float64).numpy(), np.float64)
    gradient = np.asarray(tf.cast(gradient, tf.float64).numpy(), np.float64)
    if forward.shape != tensor.shape or gradient.shape != tensor.shape:
        raise ValueError(f"output {forward.shape} and gradient {gradient.shape} for x of shape {tuple(tensor.shape)}")
    return {"forward": forward, "gradient": gradient}


def record_values(
    call, points: Callable[[str], list[ops.Point]], dtypes, errors: dict[str, str] | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """Each dtype the function runs in: the snapshot grid and the values there. A dtype that raises is left
    out, its error kept in ``errors`` (dtype -> "Type: message") for the message when none runs."""
    lo, hi = SNAPSHOT_RANGE
    values = {}
    for dtype in dtypes:
        x, _ = grid(lo, hi, SNAPSHOT_N, dtype, points(dtype))
        try:
            values[dtype] = {"x": x.astype(np.float64), **_evaluate(call, x, dtype)}
        except Exception as error:  # noqa: BLE001 - a dtype the function does not support is not pinned
            if errors is not None:
                errors[dtype] = f"{type(error).__name__}: {error}"
    return values


# -- comparing -----------------------------------------------------------------------------------------------
def _same(recorded: np.ndarray, now: np.ndarray) -> np.ndarray:
    both_nan = np.isnan(recorded) & np.isnan(now)
    return both_nan | (recorded == now)


def changes(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per value outside its dtype's tolerance: value, dtype, x, recorded, now, relative change."""
    rows = []
    for dtype, columns in recorded.items():
        rtol = RELATIVE_TOLERANCE[dtype]
        eps = float(np.finfo(numpy_dtype(dtype)).eps)
        for name in VALUES:
            old, new = columns[name], current[dtype][name]
            finite = old[np.isfinite(old)]
            noise = eps * (float(np.abs(finite).max()) if finite.size else 0.0)
            with np.errstate(invalid="ignore", over="ignore"):
                gap = np.abs(new - old)
                moved = ~_same(old, new) & ~(gap <= rtol * np.abs(old) + noise)
                relative = np.where(old != 0, gap / np.abs(np.where(old != 0, old, 1.0)), np.inf)
            for index in np.flatnonzero(moved):
                change = float(relative[index]) if np.isfinite(relative[index]) else np.inf
                rows.append({"value": name, "dtype": dtype, "x": float(columns["x"][index]),
                             "recorded": float(old[index]), "now": float(new[index]), "change": change})  # fmt: skip
    return rows


def _percent(change: float) -> str:
    return "inf" if not np.isfinite(change) else f"{100 * change:.3g} %"


def _failure(path: Path, record: Mapping[str, Any], moved: list[dict[str, Any]], problems: list[str]) -> str:
    made, now = _versions_text(record.get("made_with", {})), _versions_text(versions())
    lines = [f"{path}: the values changed since it was recorded (recorded with {made}; now {now})"]
    lines += problems
    if moved:
        worst = max(moved, key=lambda row: row["change"])
        lines.append(
            f"{len(moved)} value(s) changed; the largest relative change is {_percent(worst['change'])} "
            f"({worst['value']}, {worst['dtype']}, x = {worst['x']:g}: {worst['recorded']:.6g} -> {worst['now']:.6g})"
        )
        lines.append(f"    {'value':<9} {'dtype':<9} {'x':>9}  {'recorded':>12}  {'now':>12}  change")
        for row in sorted(moved, key=lambda row: -row["change"])[:LISTED]:
            lines.append(
                f"    {row['value']:<9} {row['dtype']:<9} {row['x']:>9.4g}  {row['recorded']:>12.6g}  "
                f"{row['now']:>12.6g}  {_percent(row['change'])}"
            )
        if len(moved) > LISTED:
            lines.append(f"    ... and {len(moved) - LISTED} more")
    lines.append(f"If the change is intended, re-record: pytest --update-snapshots (or {UPDATE_VARIABLE}=1 pytest)")
    return "\n".join(lines)


def check_snapshot(
    fn_or_layer: Any, path: str | os.PathLike, /, *, ci: bool | None = None, update: bool | None = None,
    **declarations: Any,
) -> Check:
    """The ``snapshot`` check (see the module docstring). ``declarations`` as for
    :func:`explorer.checker.guardrail.custom_gradient_checks`: ``points`` add grid points, ``params`` are passed."""
    path = Path(path)
    time_limit = declarations.get("time_limit", TIME_LIMIT)
    name, call, points, dtypes = _callable(fn_or_layer, declarations.get("params"), declarations)
    update = _flag(UPDATE_VARIABLE) if update is None else update  # given by a caller whose worker process
    ci = _flag("CI") if ci is None else ci  # was started before the test set them
    if not path.exists() and not update and ci:
        return result("snapshot", "fail", f"snapshot missing: record it locally ({path} does not exist; CI=true "
                                           "never records one): run the test without CI=true and commit the file")  # fmt: skip
    if update or not path.exists():
        try:
            errors: dict[str, str] = {}
            values = call_with_time_limit(lambda: record_values(call, points, dtypes, errors), time_limit, name="snapshot")
        except TimeLimitExceeded as error:
            return result("snapshot", "fail", f"recording {path}: {error}")
        if not values:
            first = next(iter(errors.items()), ("", "no error"))
            return result("snapshot", "fail", f"{name} runs in none of {', '.join(dtypes)}: nothing to record "
                                               f"({first[0]} raised {first[1]})")  # fmt: skip
        lo, hi = SNAPSHOT_RANGE
        record = {
            "function": name,
            "about": f"forward and custom gradient (dy = 1) on {SNAPSHOT_N} points of [{lo:g}, {hi:g}] plus the "
            "declared special points; explorer.testing.assert_custom_gradient(fn, snapshot=...)",
            "made_with": versions(),
            "params": {k: float(v) for k, v in (declarations.get("params") or {}).items()},
            "upstream": 1.0,
            "values": values,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(record), encoding="utf-8")
        verb = "re-recorded" if update else "recorded"
        message = (f"{verb} {path} ({', '.join(values)}; {_versions_text(record['made_with'])}): commit it; "
                   "later runs compare against it")  # fmt: skip
        warnings.warn(f"{name}: {message}", GradientCheckWarning, stacklevel=3)
        return result("snapshot", "warn", message)
    try:
        record = loads(path.read_text(encoding="utf-8"))
    except (ValueError, KeyError, TypeError) as error:
        return result("snapshot", "fail", f"{path} is not a snapshot ({error_text(error)}); delete it to re-record")
    current: dict[str, dict[str, np.ndarray]] = {}
    problems = []

    def evaluate_all() -> None:
        for dtype, columns in record["values"].items():
            try:
                current[dtype] = _evaluate(call, columns["x"], dtype)
            except Exception as error:  # noqa: BLE001 - user code
                problems.append(f"{dtype}: recorded, now the call raises {error_text(error)}")

    try:
        call_with_time_limit(evaluate_all, time_limit, name="snapshot")
    except TimeLimitExceeded as error:
        return result("snapshot", "fail", f"comparing with {path}: {error}")
    moved = changes({d: c for d, c in record["values"].items() if d in current}, current)
    if moved or problems:
        return result("snapshot", "fail", _failure(path, record, moved, problems))
    count = sum(len(columns["x"]) for columns in record["values"].values())
    return result(
        "snapshot",
        "pass",
        f"forward and gradient equal {path} within each dtype's tolerance at {count} points "
        f"({', '.join(record['values'])}; recorded with {_versions_text(record.get('made_with', {}))})",
    )
