"""Your own ``@tf.custom_gradient`` function as an op: :func:`from_function`.

    import ops
    spec = ops.from_function(square_with_scaled_grad)   # an OpSpec, family "yours"
    explorer.sweep(spec)                                 # views, checks and the trainer take it

Conventions:

* ``fn`` takes the tensor ``x`` first. Every other parameter needs a numeric default and becomes an
  op parameter. It is passed the way the signature asks: by keyword (``fn(x, slope=10.0)``), or
  positionally as a tensor of x's dtype if it is positional-only (``def fn(x, slope=25.0, /)``, whose
  backward must then return one gradient per positional input, ``None`` for the parameter; such a
  parameter is always passed, its default when no other value is given).
  ``tf.custom_gradient`` rejects keyword arguments inside ``tf.function``, so the views call the
  undecorated function (your forward and your backward, unchanged) under their own
  ``tf.custom_gradient`` with the parameters positional; the ``graph`` check calls yours as declared.
* An undeclared parameter range is ``[default / 10, default * 10]`` (:data:`RANGE_FACTOR`), mirrored for a
  negative default, ``[-1, 1]`` for a default of 0; integer defaults give whole-number parameters.
* The true gradient is autodiff of a declared plain ``forward``; without one it is a float64 central
  difference of ``fn``'s own forward values with step ``h = NUMERICAL_STEP * max(1, |x|)``
  (``spec.true_gradient == "numerical"``). It spikes to about ``jump / (2 h)`` at a jump.
* The justification is the declared one, else ``fn``'s docstring, else empty (the checker warns).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from ops.registry import KINDS, OpSpec, Param, Point

NUMERICAL_STEP = 1e-5  # relative; float64 central differences: truncation ~h^2, rounding ~1e-16/h, both < 1e-9
RANGE_FACTOR = 10.0
FAMILY = "yours"


def is_custom_gradient(candidate: Any) -> bool:
    """True for a callable that ``@tf.custom_gradient`` decorated (TensorFlow records the decorator's name)."""
    if not callable(candidate) or isinstance(candidate, type):
        return False
    decorators, _ = tf.__internal__.decorator.unwrap(candidate)
    return any(getattr(d, "decorator_name", None) == "custom_gradient" for d in decorators)


def undecorated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function ``@tf.custom_gradient`` wrapped: ``x -> (y, grad)``."""
    return tf.__internal__.decorator.unwrap(fn)[1]


@dataclass(frozen=True)
class UserFunction:
    """A user's custom-gradient function and how its parameters are passed."""

    fn: Callable[..., Any]  # the decorated function
    inner: Callable[..., Any]  # the undecorated one: (x, ...) -> (y, grad)
    keyword: tuple[str, ...]  # parameters passed by keyword
    positional: tuple[str, ...]  # positional-only parameters, passed positionally as tensors
    positional_defaults: Mapping[str, float]

    @property
    def name(self) -> str:
        return getattr(self.inner, "__name__", "function")

    def call(self, x: tf.Tensor, params: Mapping[str, Any] | None = None) -> tf.Tensor:
        """``fn`` itself, called as its signature asks: every positional-only parameter positionally, as a
        tensor of x's dtype (its default if not given: the backward returns a gradient for each); a keyword
        parameter by keyword, and only when given (otherwise fn's own default applies)."""
        params = dict(params or {})
        positional = [tf.cast(params.get(name, self.positional_defaults[name]), x.dtype) for name in self.positional]
        return self.fn(x, *positional, **{name: params[name] for name in self.keyword if name in params})

    def forward_values(self, x: tf.Tensor, values: Mapping[str, tf.Tensor]) -> tf.Tensor:
        """fn's forward at x (the undecorated function's y), parameters as tensors of x's dtype."""
        args = [tf.cast(values[name], x.dtype) for name in self.positional]
        kwargs = {name: tf.cast(values[name], x.dtype) for name in self.keyword}
        y, _ = self.inner(x, *args, **kwargs)
        return tf.cast(y, x.dtype)


def _signature(fn: Callable[..., Any], inner: Callable[..., Any]) -> list[tuple[str, float, bool]]:
    """``[(name, default, positional_only)]`` of the parameters after x; ValueError for what cannot be an op."""
    name = getattr(inner, "__name__", repr(fn))
    try:
        parameters = list(inspect.signature(inner).parameters.values())
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: cannot read its signature ({error})") from None
    plain = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not plain or plain[0].kind == plain[0].KEYWORD_ONLY:
        raise ValueError(f"{name} must take the input tensor x as its first positional argument")
    found = []
    for parameter in plain[1:]:
        if parameter.default is parameter.empty:
            if parameter.kind == parameter.KEYWORD_ONLY:
                raise ValueError(
                    f"{name}: keyword parameter '{parameter.name}' has no default; give it a numeric default"
                )
            raise ValueError(
                f"{name} takes a positional input '{parameter.name}' besides x: an op has one tensor input x; "
                f"give '{parameter.name}' a numeric default to make it a parameter, or close over it"
            )
        default = parameter.default
        if isinstance(default, bool) or not isinstance(default, numbers.Real) or not math.isfinite(float(default)):
            raise ValueError(
                f"{name}: parameter '{parameter.name}' has the non-numeric default {default!r}; "
                "only finite numbers (int or float) can become op parameters"
            )
        found.append((parameter.name, default, parameter.kind == parameter.POSITIONAL_ONLY))
    return found


def default_range(default: float) -> tuple[float, float]:
    """The slider range of an undeclared parameter: a factor :data:`RANGE_FACTOR` either side of the default."""
    if default == 0:
        return -1.0, 1.0
    low, high = sorted((default / RANGE_FACTOR, default * RANGE_FACTOR))
    return low, high


def _param(name: str, default: float, declared: Sequence[float] | None, op_key: str) -> Param:
    integer = isinstance(default, numbers.Integral)
    if declared is None:
        low, high = default_range(float(default))
        if integer:
            low, high = float(math.floor(low)), float(math.ceil(high))
    else:
        if len(declared) != 2 or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in declared):
            raise ValueError(f"{op_key}: ranges['{name}'] must be (low, high), two numbers; got {declared!r}")
        low, high = float(declared[0]), float(declared[1])
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"{op_key}: ranges['{name}'] = ({low:g}, {high:g}) must be finite with low < high")
        if not low <= default <= high:
            raise ValueError(
                f"{op_key}: the default {name}={default:g} is outside its declared range [{low:g}, {high:g}]"
            )
    return Param(name, float(default), low, high, "a parameter of your function", integer=integer)


def _points(points: Iterable[Any] | None, op_key: str) -> tuple[Point, ...]:
    declared = []
    for item in points or ():
        if isinstance(item, Point):
            declared.append(item)
            continue
        if isinstance(item, (tuple, list)) and len(item) in (2, 3) and isinstance(item[0], numbers.Real):
            note = item[2] if len(item) == 3 else "declared by you"
            if item[1] not in KINDS:
                raise ValueError(f"{op_key}: point kind must be one of {', '.join(KINDS)}, got {item[1]!r}")
            declared.append(Point(float(item[0]), item[1], str(note)))
            continue
        raise ValueError(f"{op_key}: a point is (x, kind) or (x, kind, note) with kind in {KINDS}, got {item!r}")
    return tuple(declared)


def _numerical_forward(user: UserFunction, names: tuple[str, ...]) -> Callable[..., tf.Tensor]:
    """fn's forward values, whose autodiff is the float64 central difference of those values."""

    @tf.custom_gradient
    def forward(x, *param_values):
        values = dict(zip(names, param_values, strict=True))
        y = user.forward_values(x, values)

        def grad(dy):
            x64 = tf.cast(x, tf.float64)
            step = NUMERICAL_STEP * tf.maximum(tf.constant(1.0, tf.float64), tf.abs(x64))
            above, below = x64 + step, x64 - step
            values64 = {k: tf.cast(v, tf.float64) for k, v in values.items()}
            rise = user.forward_values(above, values64) - user.forward_values(below, values64)
            derivative = rise / (above - below)  # the step actually taken, after rounding
            return (tf.cast(tf.cast(dy, tf.float64) * derivative, dy.dtype), *([None] * len(param_values)))

        return y, grad

    return lambda x, values: forward(x, *[values[name] for name in names])


def _custom(user: UserFunction, names: tuple[str, ...]) -> Callable[..., tf.Tensor]:
    """fn for the views: called directly without parameters; with parameters, the undecorated function
    (your forward and backward) under a ``tf.custom_gradient`` that takes them positionally, so that a
    ``tf.function`` sweep can pass them as tensors."""
    if not names:
        return lambda x, values: user.fn(x)

    @tf.custom_gradient
    def custom(x, *param_values):
        values = dict(zip(names, param_values, strict=True))
        args = [values[name] for name in user.positional]
        y, user_grad = user.inner(x, *args, **{name: values[name] for name in user.keyword})

        def grad(dy):
            result = user_grad(dy)
            given = tuple(result) if isinstance(result, (list, tuple)) else (result,)
            # positional parameters already have their gradients (None) in the user's result
            return (*given, *([None] * len(user.keyword)))

        return y, grad

    return lambda x, values: custom(x, *[values[name] for name in names])


def from_function(
    fn: Callable[..., Any],
    *,
    forward: Callable[..., Any] | None = None,
    points: Iterable[Any] | None = None,
    ranges: Mapping[str, Sequence[float]] | None = None,
    title: str | None = None,
    justification: str | None = None,
    key: str | None = None,
) -> OpSpec:
    """An :class:`OpSpec` (family "yours") for your ``@tf.custom_gradient`` function ``fn``.

    Every declaration is optional: ``forward(x, **params)`` is the plain forward whose autodiff is the
    true gradient (else: numerical, see the module docstring); ``points`` are ``(x, kind)`` or
    ``(x, kind, note)`` or :class:`ops.Point`; ``ranges`` maps a parameter to ``(low, high)``;
    ``justification`` says why the gradient is overridden (default: fn's docstring).
    TypeError if ``fn`` is not a custom-gradient function; ValueError for a signature that cannot be
    an op (a second tensor input, a non-numeric default) or a bad declaration.
    """
    if not is_custom_gradient(fn):
        what = f"the class {fn.__name__}" if isinstance(fn, type) else f"{type(fn).__name__} {fn!r}"
        raise TypeError(
            f"ops.from_function expected a function decorated with @tf.custom_gradient (returning y and a "
            f"gradient function), got {what}"
        )
    inner = undecorated(fn)
    op_key = key or getattr(inner, "__name__", "user_op")
    found = _signature(fn, inner)
    ranges = dict(ranges or {})
    unknown = sorted(set(ranges) - {name for name, _, _ in found})
    if unknown:
        valid = ", ".join(name for name, _, _ in found) or "none"
        raise ValueError(f"{op_key}: ranges for unknown parameter(s) {', '.join(unknown)}; valid: {valid}")
    params = tuple(_param(name, default, ranges.get(name), op_key) for name, default, _ in found)
    names = tuple(p.name for p in params)
    user = UserFunction(
        fn=fn,
        inner=inner,
        keyword=tuple(name for name, _, positional in found if not positional),
        positional=tuple(name for name, _, positional in found if positional),
        positional_defaults={name: float(default) for name, default, positional in found if positional},
    )
    declared = _points(points, op_key)
    if forward is not None:
        if not callable(forward):
            raise TypeError(f"{op_key}: forward must be a callable forward(x, **params), got {type(forward).__name__}")
        plain_forward = forward
        forward_fn = lambda x, values: tf.cast(plain_forward(x, **values), x.dtype)  # noqa: E731
    else:
        forward_fn = _numerical_forward(user, names)
    if justification is None:
        justification = inspect.cleandoc(inner.__doc__) if inner.__doc__ else ""
    module = getattr(inner, "__module__", None) or "?"
    return OpSpec(
        key=op_key,
        title=title or op_key,
        family=FAMILY,
        params=params,
        forward_fn=forward_fn,
        surrogate=None,
        custom_fn=_custom(user, names),
        forward_tex="",
        grad_tex="",
        why=justification,
        reference=f"your code: {module}.{getattr(inner, '__qualname__', op_key)}",
        declared_points=lambda _params, _dtype: list(declared),
        builtin=False,
        true_gradient="autodiff" if forward is not None else "numerical",
        user_function=user,
    )
