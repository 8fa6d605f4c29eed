"""What every check shares: the :class:`Check` record, the :class:`Subject` a function's checks take, the
tolerances and hard input values (each defined once), and the helpers that word a result.

Each :class:`Check` has a ``level``: ``"pass"`` (checked, and right), ``"warn"`` (worth a look, not an
error), ``"skip"`` (the check does not apply to this function, as pytest skips a test: never counted as a
pass) or ``"fail"``; ``passed`` is ``level != "fail"`` (nothing failed). A function the checker could not
exercise at all gets ``fail`` rows ("not checked"): nothing checked is not a pass. A check never raises: an
exception inside it (a gradient of the wrong dtype, a forward that cannot be traced) becomes a failed check
whose message names the exception (:func:`guarded`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

import ops
from explorer.explore import detect
from ops.inputs import Found, error_text

LEVELS = ("pass", "skip", "warn", "fail")
TIME_LIMIT = 120.0  # seconds per check; a Model.fit plus an export takes a few seconds on 2 cores
UPSTREAM = 1.5  # the graph checks use an upstream gradient != 1, so ops acting on dy are exercised
GRAPH_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # eager vs tf.function vs XLA (which may fuse transcendental ops)
COMPARE_TOLERANCE = {"rtol": 1e-4, "atol": 1e-6}  # one float32 computation against another (a reload, a layer)
RATIO_TOLERANCE = 1e-3  # relative: the custom gradient is a constant times the true one
ZERO_GRADIENT = COMPARE_TOLERANCE["atol"] * 10  # a true gradient this small is zero (a flat forward)
# The hard input values per dtype: 0, a tiny number, a large one, and where exp() overflows (log of the max is
# 11.1 for float16, 88.7 for float32, 709.8 for float64). Elementwise checks use each and its negative
# (:func:`hard_places`); the others fill one input with each, or its negative, at a time.
HARD_VALUES: dict[str, dict[str, float]] = {
    "float16": {"0": 0.0, "tiny": 6e-08, "1e4": 1e4, "exp overflow": 12.0},
    "float32": {"0": 0.0, "tiny": 1e-30, "1e4": 1e4, "exp overflow": 100.0},
    "float64": {"0": 0.0, "tiny": 1e-30, "1e4": 1e4, "exp overflow": 1000.0},
}
# In a clone, the repository's verification/ folder; installed from a wheel, ./verification (never site-packages).
_CLONE = Path(__file__).resolve().parent.parent
VERIFICATION_DIR = _CLONE / "verification" if (_CLONE / "pyproject.toml").exists() else Path("verification")
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


def hard_places(dtype: str) -> tuple[float, ...]:
    """0, then +- each other hard value of ``dtype``: tiny, exp overflow, 1e4 (the elementwise checks' order)."""
    values = HARD_VALUES[dtype]
    return (0.0, *(sign * values[name] for name in ("tiny", "exp overflow", "1e4") for sign in (1.0, -1.0)))


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


def result(name: str, level: str, message: str) -> Check:
    return Check(name=name, passed=level != "fail", message=message, level=level)


def explained(error: BaseException) -> str:
    """:func:`ops.inputs.error_text`, with the fix for a known error (:data:`HINTS`) appended."""
    text = error_text(error)
    hints = [hint for marker, hint in HINTS if marker in str(error)]
    return text.rstrip(". ") + (f". Fix: {hints[0]}" if hints else "")


def explain_fail(check: Check) -> Check:
    """A failed check with the fix for a known error in its message ("keywords arguments only when eager",
    NumPy, gradient count) appended."""
    if check.passed or "Fix:" in check.message:
        return check
    hints = [hint for marker, hint in HINTS if marker in check.message]
    return check if not hints else result(check.name, "fail", f"{check.message}. Fix: {hints[0]}")


def guarded(name: str, *, fix: bool = False) -> Callable[[Callable[..., Check]], Callable[..., Check]]:
    """Turn any exception raised by a check into a failed :class:`Check` naming it; with ``fix``, worded as
    the plan words an exception that reaches it (:func:`explained`: the fix for a known error appended)."""
    text = explained if fix else error_text

    def decorate(function: Callable[..., Check]) -> Callable[..., Check]:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Check:
            try:
                return function(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - a check reports, it never raises
                return result(name, "fail", f"the check raised {text(error)}")

        return run

    return decorate


@contextlib.contextmanager
def quiet_tensorflow() -> Iterator[None]:
    """TensorFlow logs a traceback when it cannot save a gradient, and warns about retracing: the checks say it."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("CRITICAL")
    try:
        yield
    finally:
        logger.setLevel(level)


# -- wording ---------------------------------------------------------------------------------------------
def fmt(value: float) -> str:
    return f"{value:.4g}"


def where(x: np.ndarray, mask: np.ndarray, limit: int = 3) -> str:
    """Where ``mask`` holds on the sorted grid ``x``, as runs: "x in [-3, -0.003] (1000 points), x = 0"."""
    found = detect.runs(mask)
    if not found:
        return "nowhere"
    parts = []
    for start, end in found[:limit]:
        if start == end:
            parts.append(f"x = {fmt(x[start])}")
        else:
            parts.append(f"x in [{fmt(x[start])}, {fmt(x[end])}] ({end - start + 1} points)")
    if len(found) > limit:
        parts.append(f"and {len(found) - limit} more run(s)")
    return ", ".join(parts)


def flag_text(flags: Mapping[str, Any]) -> str:
    """"clip=True, mode='fast'": flag values as the messages name them."""
    return ", ".join(f"{k}={v!r}" for k, v in flags.items())


def passed_text(user: ops.user.UserFunction, used: Mapping[str, float], flags: Mapping[str, Any] | None) -> str:
    """" with slope=12 by keyword, clip=True by keyword": how the non-default values were passed."""
    parts = [f"{k}={fmt(v)} by keyword" if k in user.keyword else f"{k}={fmt(v)} positionally" for k, v in used.items()]
    for name, value in (flags or {}).items():
        if value == user.flags[name][0]:
            parts.append(f"{name}={value!r} (its default, not passed)")
        else:
            how = "positionally" if name in user.positional_flags else "by keyword"
            parts.append(f"{name}={value!r} {how}")
    return f" with {', '.join(parts)}" if parts else ""


def undeclared_difference(user: ops.user.UserFunction | None, key: str) -> str:
    """The end of a ``vs_autodiff`` warning for a difference nobody declared: the docstring quoted as context
    (it declares nothing) and the one line that declares a justification."""
    name = key  # the key the declaration is read under (the module-level name verify and the guardrail use)
    docstring = "" if user is None else user.docstring
    if len(docstring) > 120:
        docstring = docstring[:117] + "..."
    context = f' (its docstring "{docstring}" is context, not a declaration)' if docstring else ""
    return (
        f"No justification declared{context}: if the difference is intentional, declare why in one line, "
        f'GRADIENT_EXPLORER = {{"{name}": {{"justification": "<why>"}}}} in its module (or justification="<why>" '
        "in ops.from_function or assert_custom_gradient); if not, fix the backward"
    )


# -- what is checked ---------------------------------------------------------------------------------------
def value_and_grad(call: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor, upstream: Any = None):
    """``call(x)`` and its gradient with respect to x (None if the backward gives none)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = call(x)
    return y, tape.gradient(y, x, output_gradients=upstream)


@dataclass
class Subject:
    """What a function's checks take: an op at its parameters (``params``: every one, resolved) and, for a
    function that is not one input, elementwise, the input assignments it accepts (``found``). Without
    ``found`` the sweep-based checks of :mod:`explorer.checker.elementwise` apply, else those of
    :mod:`explorer.checker.any_signature`. ``cache`` keeps what several checks share (the sweep)."""

    spec: ops.OpSpec
    params: Mapping[str, float]
    found: Found | None = None
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, op: ops.OpSpec | Callable[..., Any], /, **params: Any) -> Subject:
        """An op (or your function, made one by :func:`ops.from_function`) at ``params``, defaults for the rest,
        without input assignments: a subject of the elementwise checks. ValueError for an invalid parameter."""
        spec = op if isinstance(op, ops.OpSpec) else ops.from_function(op)
        return cls(spec, spec.resolve(params))

    @property
    def elementwise(self) -> bool:
        return self.found is None

    @functools.cached_property
    def user(self) -> ops.user.UserFunction:
        """Your function; for an op that declares forward and surrogate, the function it stands for."""
        return ops.user.from_spec(self.spec) if self.spec.user_function is None else self.spec.user_function

    @property
    def given(self) -> dict[str, float]:
        """The parameters that differ from the function's defaults: only those are passed."""
        defaults = self.spec.defaults()
        return {name: value for name, value in self.params.items() if value != defaults[name]}

    def call(self, flags: Mapping[str, Any] | None = None) -> Callable[[tf.Tensor], tf.Tensor]:
        """``x -> y``: the function on one input, called as its signature asks."""
        user, given = self.user, self.given
        return lambda x: user.call(x, given, flags)

    def call_all(self, flags: Mapping[str, Any] | None = None) -> Callable[[Sequence[tf.Tensor]], Any]:
        """``inputs -> outputs``: the function on every tensor input, called as its signature asks."""
        user, given = self.user, self.given
        return lambda inputs: user.call_all(inputs, given, flags)
