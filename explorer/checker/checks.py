"""The gradient checker's record (:class:`Check`), the helpers every check shares, and the two checks that
take any callable: ``shape_dtype`` (:func:`check_shape_dtype`) and ``keras_fit`` (:func:`check_keras_fit`).

The checks themselves are those of :mod:`explorer.checker.user` for every elementwise op: a built-in
or editor op is a function with declarations (forward, surrogate, special points, why), checked the
way your own function is (:func:`explorer.checker.user.check_function`).

Each :class:`Check` has a ``level``: ``"pass"`` (checked, and right), ``"warn"`` (worth a look, not an
error), ``"skip"`` (the check does not apply to this function, as pytest skips a test: never counted as a
pass) or ``"fail"``; ``passed`` is ``level != "fail"`` (nothing failed). A function the checker could not
exercise at all gets ``fail`` rows ("not checked"): nothing checked is not a pass. A check never raises: an
exception inside it (a gradient of the wrong dtype, a forward that cannot be traced) becomes a failed check
whose message names the exception.
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
import tensorflow as tf

import ops
from explorer.explore import detect
from explorer.explore.sweeps import grid

LEVELS = ("pass", "skip", "warn", "fail")
SWEEP_RANGE = (-3.0, 3.0)
SWEEP_N = 2001
SHAPES: tuple[tuple[int, ...], ...] = ((), (7,), (4, 3, 5))
SHAPE_DTYPES = ("float16", "float32", "float64")
UPSTREAM = 1.5  # the graph check uses an upstream gradient != 1, so ops acting on dy are exercised
GRAPH_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # XLA may fuse transcendental ops differently
# In a clone, the repository's verification/ folder; installed from a wheel, ./verification (never site-packages).
_CLONE = Path(__file__).resolve().parent.parent
VERIFICATION_DIR = _CLONE / "verification" if (_CLONE / "pyproject.toml").exists() else Path("verification")


class GradientCheckWarning(UserWarning):
    """A check's ``warn`` row, raised as a warning by ``assert_custom_gradient`` (public as
    ``explorer.testing.GradientCheckWarning``): pytest lists it in its warnings summary, and
    ``filterwarnings = ["error::explorer.testing.GradientCheckWarning"]`` turns it into a failure."""


@dataclass(frozen=True)
class Check:
    """One check's result. ``level`` is "pass", "skip", "warn" or "fail"; ``passed`` is ``level != "fail"``."""

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


def undeclared_difference(user: ops.user.UserFunction | None, key: str) -> str:
    """The end of a ``vs_autodiff`` warning for a difference nobody declared: the docstring quoted as context
    (it declares nothing) and the one line that declares a justification."""
    name = key if user is None else user.name
    docstring = "" if user is None else user.docstring
    if len(docstring) > 120:
        docstring = docstring[:117] + "..."
    context = f' (its docstring "{docstring}" is context, not a declaration)' if docstring else ""
    return (
        f"No justification declared{context}: if the difference is intentional, declare why in one line, "
        f'GRADIENT_EXPLORER = {{"{name}": {{"justification": "<why>"}}}} in its module (or justification="<why>" '
        "in ops.from_function or assert_custom_gradient); if not, fix the backward"
    )


def _shape_text(shape: Sequence[int]) -> str:
    return "scalar" if len(shape) == 0 else f"shape {tuple(shape)}"


# -- the checks that take any callable -------------------------------------------------------------------------------------
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
