"""The op registry: one declaration per op drives every view, test and export.

An op is an :class:`OpSpec`. Its forward is plain TensorFlow (autodiff of it is the *true*
gradient); :meth:`OpSpec.apply` wraps the same forward in ``tf.custom_gradient`` so that the
backward is the declared surrogate ``dy * g(x)`` (or a full ``backward`` for ops such as
``clip_gradient`` that act on ``dy`` itself).

Half-precision inputs (float16, bfloat16) are computed in float32 and rounded back, the way
Keras mixed precision keeps numerically sensitive ops in float32: output and gradient keep the
input dtype, but a surrogate is not destroyed by half-precision intermediate rounding.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

FAMILIES = ("spike", "sign", "clip", "override", "stability", "yours")  # "yours": ops.from_function
TRUE_GRADIENTS = ("autodiff", "numerical")
KINDS = ("jump", "kink", "boundary", "singular")
DTYPES = ("float16", "bfloat16", "float32", "float64")
HALF_DTYPES = ("float16", "bfloat16")

# Tensor-valued forward / surrogate: (x, params) -> tensor, params already cast to x.dtype.
TensorFn = Callable[[tf.Tensor, Mapping[str, tf.Tensor]], tf.Tensor]
BackwardFn = Callable[[tf.Tensor, tf.Tensor, Mapping[str, tf.Tensor]], tf.Tensor]


@dataclass(frozen=True)
class Param:
    """A hyper-parameter with a default and the closed range a slider may take."""

    name: str
    default: float
    low: float
    high: float
    help: str = ""
    integer: bool = False

    def validate(self, value: Any, op_key: str = "") -> Any:
        """Return ``value`` as a float (or a symbolic tensor unchanged); ValueError if invalid."""
        where = f"{op_key}: " if op_key else ""
        allowed = f"allowed range [{_fmt(self.low)}, {_fmt(self.high)}]"
        if isinstance(value, (tf.Tensor, tf.Variable)):
            if not tf.executing_eagerly() or not hasattr(value, "numpy"):
                return value  # symbolic (inside tf.function): cannot be checked without retracing
            if value.shape.rank not in (0, None) or not value.dtype.is_floating and not value.dtype.is_integer:
                raise ValueError(f"{where}parameter '{self.name}' must be a real scalar, {allowed}")
            checked = self.validate(value.numpy().item(), op_key)
            return value if not self.integer else checked
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{where}parameter '{self.name}' must be a number, got {type(value).__name__}; {allowed}")
        number = float(value)
        if math.isnan(number):
            raise ValueError(f"{where}parameter '{self.name}' is NaN; {allowed}")
        if not self.low <= number <= self.high:
            raise ValueError(f"{where}parameter '{self.name}' = {_fmt(number)} is outside the {allowed}")
        if self.integer and number != round(number):
            raise ValueError(f"{where}parameter '{self.name}' must be a whole number in [{self.low:g}, {self.high:g}]")
        return number


@dataclass(frozen=True)
class Point:
    """A declared special point: where a convention lives. ``kind`` is one of :data:`KINDS`."""

    x: float
    kind: str
    note: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"point kind must be one of {KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Expression:
    """The op written in the editor's expression language (``explorer.expr``), for code export.

    ``gradient`` is g(x) (backward ``dy * g``); ``backward`` is an expression in x, ``dy`` and
    the parameters, for ops that act on the upstream gradient itself. Give exactly one.
    """

    forward: str
    gradient: str | None = None
    backward: str | None = None

    def __post_init__(self) -> None:
        if (self.gradient is None) == (self.backward is None):
            raise ValueError("give exactly one of gradient (g(x)) or backward (in x and dy)")


def _fmt(value: float) -> str:
    return f"{value:g}"


def compute_dtype(dtype: str | tf.DType) -> str:
    """The dtype an op computes in: float32 for half precision (the result is rounded back), else ``dtype``."""
    name = tf.as_dtype(dtype).name
    return "float32" if name in HALF_DTYPES else name


def _no_points(_params: Mapping[str, float], _dtype: str) -> list[Point]:
    return []


@dataclass(frozen=True, eq=False)
class OpSpec:
    """Everything about one op. Build it once; views, tests and exports read it.

    ``surrogate`` gives g(x) so that the custom backward is ``dy * g(x)``; ``backward`` (if set)
    replaces that with a full ``(x, dy, params) -> dx``. ``declared_points(params, dtype)``
    maps resolved parameters to every special point (unbounded); :meth:`points` filters to a range.
    ``constraint`` checks relations between parameters (e.g. ``lo < hi``) and raises ValueError.

    ``custom_fn`` (instead of ``surrogate``/``backward``) is a ready custom-gradient callable
    ``(x, params) -> y`` that :meth:`apply` calls as it is: a user's own ``@tf.custom_gradient``
    function (:func:`ops.from_function`), whose backward the project must not rewrite.
    ``true_gradient`` says how the true gradient (autodiff of ``forward_fn``) is obtained:
    ``"autodiff"`` of a plain forward, or ``"numerical"`` when ``forward_fn`` carries a
    central-difference derivative because no plain forward was declared; views label it with
    :attr:`true_gradient_label`. ``user_function`` is what a user op was adapted from
    (:class:`ops.user.UserFunction`), for the checks that call it the way its signature asks.
    """

    key: str
    title: str
    family: str
    params: tuple[Param, ...]
    forward_fn: TensorFn
    surrogate: TensorFn | None
    forward_tex: str
    grad_tex: str
    why: str
    reference: str
    backward: BackwardFn | None = None
    declared_points: Callable[[Mapping[str, float], str], Iterable[Point]] = _no_points
    constraint: Callable[[Mapping[str, float]], None] | None = None
    builtin: bool = True
    source: Mapping[str, Any] | None = None  # user ops: the expressions they were compiled from
    expression: Expression | None = None  # built-in ops: the same formulas in the expression language
    custom_fn: TensorFn | None = None
    true_gradient: str = "autodiff"
    user_function: Any = None
    _custom: Callable[..., tf.Tensor] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"op {self.key!r}: family must be one of {FAMILIES}, got {self.family!r}")
        given = [name for name in ("surrogate", "backward", "custom_fn") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"op {self.key!r}: give exactly one of surrogate, backward or custom_fn")
        if self.true_gradient not in TRUE_GRADIENTS:
            raise ValueError(f"op {self.key!r}: true_gradient must be one of {TRUE_GRADIENTS}, got {self.true_gradient!r}")
        # Op functions are plain TensorFlow with no Python control flow on tensors: AutoGraph has
        # nothing to convert (and cannot parse lambdas), so tell it to leave them alone.
        for name in ("forward_fn", "surrogate", "backward", "custom_fn"):
            fn = getattr(self, name)
            if fn is not None:
                object.__setattr__(self, name, tf.autograph.experimental.do_not_convert(fn))
        object.__setattr__(self, "_custom", self._build_custom())

    # -- parameters -------------------------------------------------------------------------
    def defaults(self) -> dict[str, float]:
        return {p.name: p.default for p in self.params}

    @property
    def true_gradient_label(self) -> str:
        """How views name the true gradient: "true gradient (autodiff)" or "true gradient (numerical)"."""
        return f"true gradient ({self.true_gradient})"

    @property
    def declares_surrogate(self) -> bool:
        """A forward and a surrogate (or backward) declared apart (a built-in, an editor op), not a ready
        custom-gradient function: such an op must declare each of its special points."""
        return self.custom_fn is None

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def resolve(self, params: Mapping[str, Any] | None = None, /, **kwargs: Any) -> dict[str, Any]:
        """Validate parameters, fill the missing ones with defaults; ValueError names the range."""
        given = {**(params or {}), **kwargs}
        unknown = sorted(set(given) - set(self.param_names))
        if unknown:
            valid = ", ".join(self.param_names) or "none"
            raise ValueError(f"{self.key}: unknown parameter(s) {', '.join(unknown)}; valid: {valid}")
        values = {p.name: p.validate(given.get(p.name, p.default), self.key) for p in self.params}
        if self.constraint is not None and all(isinstance(v, float) for v in values.values()):
            self.constraint(values)
        return values

    # -- tensors -----------------------------------------------------------------------------
    def forward(self, x: Any, **params: Any) -> tf.Tensor:
        """Plain TensorFlow forward; autodiff of this is the true gradient."""
        x = as_float_tensor(x)
        compute, values = self._compute_inputs(x, params)
        return tf.cast(self.forward_fn(compute, values), x.dtype)

    def apply(self, x: Any, **params: Any) -> tf.Tensor:
        """Same values as :meth:`forward`; the backward is the custom gradient."""
        x = as_float_tensor(x)
        compute, values = self._compute_inputs(x, params)
        return tf.cast(self._custom(compute, *values.values()), x.dtype)

    def surrogate_grad(self, x: Any, upstream: Any = 1.0, **params: Any) -> tf.Tensor:
        """The custom gradient dx for a constant upstream gradient, without a tape."""
        x = as_float_tensor(x)
        compute, values = self._compute_inputs(x, params)
        dy = tf.fill(tf.shape(compute), tf.cast(upstream, compute.dtype))
        if self.custom_fn is not None:
            with tf.GradientTape() as tape:
                tape.watch(compute)
                y = self.custom_fn(compute, values)
            return tf.cast(tape.gradient(y, compute, output_gradients=dy), x.dtype)
        return tf.cast(self._backward(compute, dy, values), x.dtype)

    def points(self, lo: float, hi: float, /, dtype: str = "float32", **params: Any) -> list[Point]:
        """Declared special points with ``lo <= x <= hi``, sorted by x.

        ``dtype`` matters only for points that depend on the float format (an overflow onset).
        ``lo``/``hi`` are positional-only: ``leaky_clip`` has parameters with those names.
        """
        values = self.resolve(params)
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        found = self.declared_points(values, dtype)
        return sorted((p for p in found if lo <= p.x <= hi), key=lambda p: p.x)

    # -- internals ---------------------------------------------------------------------------
    def _compute_inputs(self, x: tf.Tensor, params: Mapping[str, Any]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        compute = tf.as_dtype(compute_dtype(x.dtype))
        values = self.resolve(params)
        # tf.cast of a Python float goes through float32: build constants in the compute dtype.
        return tf.cast(x, compute), {
            k: tf.cast(v, compute) if isinstance(v, (tf.Tensor, tf.Variable)) else tf.constant(v, compute)
            for k, v in values.items()
        }

    def _backward(self, x: tf.Tensor, dy: tf.Tensor, values: Mapping[str, tf.Tensor]) -> tf.Tensor:
        if self.backward is not None:
            return self.backward(x, dy, values)
        return dy * self.surrogate(x, values)

    def _build_custom(self) -> Callable[..., tf.Tensor]:
        names = self.param_names
        if self.custom_fn is not None:
            custom_fn = self.custom_fn
            return lambda x, *param_values: custom_fn(x, dict(zip(names, param_values, strict=True)))

        # Tensors go in positionally: keyword arguments to a custom-gradient function are
        # rejected in graph mode and silently ignored in eager mode.
        @tf.custom_gradient
        def custom(x, *param_values):
            values = dict(zip(names, param_values, strict=True))
            y = self.forward_fn(x, values)

            def grad(dy):
                return (self._backward(x, dy, values), *([None] * len(param_values)))

            return y, grad

        return custom


def as_float_tensor(x: Any) -> tf.Tensor:
    """A float tensor from ``x``; Python numbers and lists become float32, integer tensors raise."""
    if isinstance(x, (tf.Tensor, tf.Variable)) or (isinstance(x, np.ndarray) and x.dtype != object):
        tensor = tf.convert_to_tensor(x)
    else:
        tensor = tf.convert_to_tensor(x, dtype=tf.float32)
    if tensor.dtype.name not in DTYPES:
        raise TypeError(
            f"ops take float16, bfloat16, float32 or float64 inputs, got {tensor.dtype.name}; "
            "cast first, e.g. tf.cast(x, tf.float32)"
        )
    return tensor


_REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Add a built-in op; the key must be new."""
    if spec.key in _REGISTRY:
        raise ValueError(f"op {spec.key!r} is already registered")
    _REGISTRY[spec.key] = spec
    return spec


def names() -> list[str]:
    """Every built-in op key, in catalogue order."""
    return list(_REGISTRY)


def get(key: str | OpSpec) -> OpSpec:
    """The spec for ``key`` (an OpSpec passes through); KeyError lists the valid keys."""
    if isinstance(key, OpSpec):
        return key
    try:
        return _REGISTRY[key]
    except (KeyError, TypeError):
        raise KeyError(f"unknown op {key!r}; valid ops: {', '.join(_REGISTRY)}") from None


def by_family() -> dict[str, list[OpSpec]]:
    """Built-in ops grouped by family, families in :data:`FAMILIES` order; a family without a built-in op
    ("yours": ops from :func:`ops.from_function` are never registered) is left out."""
    grouped = {family: [s for s in _REGISTRY.values() if s.family == family] for family in FAMILIES}
    return {family: specs for family, specs in grouped.items() if specs}
