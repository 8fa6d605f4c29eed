"""Your own ``@tf.custom_gradient`` function as an op: :func:`from_function`.

    import ops
    spec = ops.from_function(square_with_scaled_grad)   # an OpSpec, family "yours"
    explorer.sweep(spec)                                 # views, checks and the trainer take it

Conventions:

* ``fn`` takes the tensor ``x`` first. Its other parameters are, by their default:

  - none (required): another tensor input (``def grad_reverse(x, lam)``, ``def bias_add(x, b)``), passed
    positionally (by keyword if keyword-only); the backward returns one gradient per positional input;
  - ``True``/``False`` or a string: a flag (:attr:`UserFunction.flags`), checked at both values of a bool
    and at a string's default, passed the way the signature asks (by keyword unless positional-only);
  - ``None`` or anything else not numeric: left at its default, never passed;
  - a number: an op parameter, as follows.

  Functions with more than one tensor input, several outputs, or an output that is not elementwise (a norm,
  a sum, a matrix product) are checked by the checker (``python -m explorer verify``); the app draws them
  through views (other inputs as sliders, or a line through input space).
  ``input_shapes`` declares the input shapes to check them at (see :data:`SHAPE_RULES`).
  A numeric parameter is passed the way the signature asks: by keyword (``fn(x, slope=10.0)``), or
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
* The justification is the declared one only (``justification=``, or the module's ``GRADIENT_EXPLORER``
  dict through the checker), else empty. A docstring is context, never a justification: the checker quotes
  it (:attr:`UserFunction.docstring`) but only a declaration makes a difference from autodiff intentional.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
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
    inputs: tuple[str, ...] = ("x",)  # tensor inputs, x first, in signature order
    keyword_inputs: tuple[str, ...] = ()  # keyword-only tensor inputs (passed by keyword)
    flags: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # flag -> values to check, default first
    positional_flags: tuple[str, ...] = ()  # positional-only flags
    order: tuple[str, ...] = ()  # every positional name in signature order
    input_shapes: tuple[tuple[tuple[int, ...], ...], ...] = ()  # declared shape assignments (one shape per input)
    domain: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # declared input -> (low, high)

    @property
    def name(self) -> str:
        return getattr(self.inner, "__name__", "function")

    @property
    def docstring(self) -> str:
        """The function's docstring on one line ("" without one): context for a reader, not a justification."""
        return " ".join(inspect.cleandoc(self.inner.__doc__).split()) if self.inner.__doc__ else ""

    @property
    def flag_defaults(self) -> dict[str, Any]:
        return {name: values[0] for name, values in self.flags.items()}

    def flag_settings(self) -> list[dict[str, Any]]:
        """Every combination of flag values to check, the defaults first (``[{}]`` without flags)."""
        settings: list[dict[str, Any]] = [{}]
        for name, values in self.flags.items():
            settings = [{**setting, name: value} for setting in settings for value in values]
        return settings

    def call_all(
        self,
        inputs: Sequence[tf.Tensor],
        params: Mapping[str, Any] | None = None,
        flags: Mapping[str, Any] | None = None,
        *,
        function: Callable[..., Any] | None = None,
    ) -> Any:
        """``fn`` (or ``function``, e.g. the undecorated one) on every tensor input, called as its signature
        asks: positional inputs and positional-only parameters positionally (those as tensors of x's dtype,
        their default if not given), keyword inputs by keyword; a keyword parameter or flag is passed only
        when given and different from its default (otherwise fn's own default applies)."""
        params, flags = dict(params or {}), dict(flags or {})
        values = dict(zip(self.inputs, inputs, strict=True))
        dtype = inputs[0].dtype
        positional: list[Any] = []
        for name in self.order:
            if name in values and name not in self.keyword_inputs:
                positional.append(values[name])
            elif name in self.positional:
                positional.append(tf.cast(params.get(name, self.positional_defaults[name]), dtype))
            elif name in self.positional_flags:
                positional.append(flags.get(name, self.flags[name][0]))
        keywords = {name: values[name] for name in self.keyword_inputs}
        keywords.update({name: params[name] for name in self.keyword if name in params})
        keywords.update(
            {
                name: flags[name]
                for name in self.flags
                if name not in self.positional_flags and name in flags and flags[name] != self.flags[name][0]
            }
        )
        return (function or self.fn)(*positional, **keywords)

    def call(
        self, x: tf.Tensor, params: Mapping[str, Any] | None = None, flags: Mapping[str, Any] | None = None
    ) -> tf.Tensor:
        """``fn`` itself, called as its signature asks: every positional-only parameter positionally, as a
        tensor of x's dtype (its default if not given: the backward returns a gradient for each); a keyword
        parameter by keyword, and only when given (otherwise fn's own default applies)."""
        return self.call_all([x], params, flags)

    def forward_values(
        self, x: tf.Tensor, values: Mapping[str, tf.Tensor], flags: Mapping[str, Any] | None = None
    ) -> tf.Tensor:
        """fn's forward at x (the undecorated function's y), parameters as tensors of x's dtype."""
        y = self.forward_all([x], values, flags)
        return tf.cast(y, x.dtype)

    def forward_all(
        self, inputs: Sequence[tf.Tensor], values: Mapping[str, Any], flags: Mapping[str, Any] | None = None
    ) -> Any:
        """The undecorated function's forward (its ``y``: a tensor, or a tuple/list of them), every parameter
        given as a tensor of the first input's dtype and passed (so a keyword one by keyword)."""
        dtype = inputs[0].dtype
        params = {name: tf.cast(values[name], dtype) for name in (*self.positional, *self.keyword) if name in values}
        flags = {**self.flag_defaults, **(flags or {})}
        every_flag = {name: flags[name] for name in self.flags}
        y, _ = self._call_inner(inputs, params, every_flag)
        return y

    def is_elementwise(self, params: Mapping[str, Any] | None = None) -> bool:
        """One tensor input, one output of its shape, computed element by element, and no variable read: the
        undecorated forward (float64, else float32) on 7 numbers agrees with itself on a prefix, on the
        reversed numbers and on the numbers as a (2, 3) matrix. Only such a function can be drawn as a curve.
        True also when the forward raises in both dtypes (the checks report that error)."""
        if len(self.inputs) != 1:
            return False
        params = dict(params or {})
        numbers = np.linspace(-1.7, 1.9, 7)

        def forward(values: np.ndarray, dtype: str) -> Any:
            return self.forward_all([tf.constant(values, dtype)], params)

        for dtype in ("float64", "float32"):
            try:
                with tf.GradientTape() as tape:
                    y = forward(numbers, dtype)
                if tape.watched_variables() or isinstance(y, (list, tuple)):
                    return False
                y = np.asarray(y.numpy(), np.float64)
                if y.shape != numbers.shape:
                    return False
                pieces = (
                    (numbers[:3], y[:3]),
                    (numbers[::-1], y[::-1]),
                    (numbers[:6].reshape(2, 3), y[:6].reshape(2, 3)),
                )
                for values, expected in pieces:
                    got = np.asarray(forward(values, dtype).numpy(), np.float64)
                    if got.shape != expected.shape or not np.allclose(got, expected, equal_nan=True, rtol=1e-6, atol=1e-9):
                        return False
                return True
            except Exception:  # noqa: BLE001 - try float32; a forward that never runs is the checks' to report
                continue
        return True

    def _call_inner(self, inputs: Sequence[Any], params: Mapping[str, Any], flags: Mapping[str, Any]) -> Any:
        """The undecorated function's ``(y, grad)``: every given parameter and flag passed, by keyword where
        the signature allows (no ``tf.custom_gradient`` here to refuse keywords)."""
        saved = dict(self.flags)
        keyword_names = [name for name in self.keyword if name in params]
        positional_params = {name: params[name] for name in self.positional if name in params}
        values = dict(zip(self.inputs, inputs, strict=True))
        positional: list[Any] = []
        for name in self.order:
            if name in values and name not in self.keyword_inputs:
                positional.append(values[name])
            elif name in self.positional:
                positional.append(positional_params.get(name, tf.cast(self.positional_defaults[name], inputs[0].dtype)))
            elif name in self.positional_flags:
                positional.append(flags.get(name, saved[name][0]))
        keywords = {name: values[name] for name in self.keyword_inputs}
        keywords.update({name: params[name] for name in keyword_names})
        keywords.update({name: flags[name] for name in self.flags if name not in self.positional_flags and name in flags})
        return self.inner(*positional, **keywords)


@dataclass(frozen=True)
class _Signature:
    params: list[tuple[str, float, bool]]  # (name, default, positional_only): numeric op parameters
    inputs: tuple[str, ...]
    keyword_inputs: tuple[str, ...]
    flags: dict[str, tuple[Any, ...]]
    positional_flags: tuple[str, ...]
    order: tuple[str, ...]


def _signature(fn: Callable[..., Any], inner: Callable[..., Any]) -> _Signature:
    """Sort the parameters into tensor inputs, numeric op parameters and flags (see the module docstring)."""
    name = getattr(inner, "__name__", repr(fn))
    try:
        parameters = list(inspect.signature(inner).parameters.values())
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: cannot read its signature ({error})") from None
    plain = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not plain or plain[0].kind == plain[0].KEYWORD_ONLY:
        raise ValueError(f"{name} must take the input tensor x as its first positional argument")
    params, inputs, keyword_inputs, positional_flags, order = [], [plain[0].name], [], [], [plain[0].name]
    flags: dict[str, tuple[Any, ...]] = {}
    for parameter in plain[1:]:
        positional_only = parameter.kind == parameter.POSITIONAL_ONLY
        if parameter.kind != parameter.KEYWORD_ONLY:
            order.append(parameter.name)
        default = parameter.default
        if default is parameter.empty:
            inputs.append(parameter.name)
            if parameter.kind == parameter.KEYWORD_ONLY:
                keyword_inputs.append(parameter.name)
        elif isinstance(default, bool):
            flags[parameter.name] = (default, not default)
        elif isinstance(default, str):
            flags[parameter.name] = (default,)
        elif isinstance(default, numbers.Real) and math.isfinite(float(default)):
            params.append((parameter.name, default, positional_only))
            continue
        else:
            continue  # None or another object: left at its default
        if positional_only and parameter.name in flags:
            positional_flags.append(parameter.name)
    return _Signature(params, tuple(inputs), tuple(keyword_inputs), flags, tuple(positional_flags), tuple(order))


def _shapes(declared: Any, inputs: tuple[str, ...], op_key: str) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """``input_shapes``: a list of assignments, each one shape (a tuple of ints) per tensor input."""
    if declared is None:
        return ()
    example = f"e.g. input_shapes=[{tuple((4, 3) for _ in inputs)}, {tuple((2, 5) for _ in inputs)}]"
    if isinstance(declared, (str, bytes)) or not isinstance(declared, Iterable):
        raise ValueError(f"{op_key}: input_shapes must be a list of assignments, one shape per input; {example}")
    assignments = []
    for assignment in declared:
        shapes = tuple(assignment) if isinstance(assignment, (list, tuple)) else None
        if len(inputs) == 1 and shapes is not None and all(isinstance(d, numbers.Integral) for d in shapes):
            shapes = (shapes,)  # one input: a bare shape is allowed
        ok = shapes is not None and len(shapes) == len(inputs)
        ok = ok and all(
            isinstance(shape, (list, tuple))
            and all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and 0 < d <= 10_000 for d in shape)
            for shape in shapes
        )
        if not ok:
            raise ValueError(
                f"{op_key}: input_shapes entry {assignment!r} must give one shape (a tuple of positive ints) for "
                f"each of the {len(inputs)} input(s) {', '.join(inputs)}; {example}"
            )
        assignments.append(tuple(tuple(int(d) for d in shape) for shape in shapes))
    if not assignments:
        raise ValueError(f"{op_key}: input_shapes is empty; {example}")
    return tuple(assignments)


def _domain(declared: Any, inputs: tuple[str, ...], op_key: str) -> dict[str, tuple[float, float]]:
    """``domain``: tensor input -> (low, high), both finite, low < high."""
    if declared is None:
        return {}
    if not isinstance(declared, Mapping):
        raise ValueError(f"{op_key}: domain must map a tensor input to (low, high), e.g. {{'{inputs[0]}': (0.1, 2.0)}}")
    found = {}
    for name, bounds in declared.items():
        if name not in inputs:
            raise ValueError(f"{op_key}: domain for {name!r}, not a tensor input; valid: {', '.join(inputs)}")
        try:
            low, high = (float(b) for b in bounds)
        except (TypeError, ValueError):
            raise ValueError(f"{op_key}: domain of {name} must be (low, high), two numbers; got {bounds!r}") from None
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise ValueError(f"{op_key}: domain of {name} must be finite with low < high; got ({low}, {high})")
        found[name] = (low, high)
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
        return lambda x, values: user.call(x)  # a positional-only flag is always passed

    @tf.custom_gradient
    def custom(x, *param_values):
        values = dict(zip(names, param_values, strict=True))
        y, user_grad = user._call_inner([x], values, {})

        def grad(dy):
            result = user_grad(dy)
            given = tuple(result) if isinstance(result, (list, tuple)) else (result,)
            # positional parameters already have their gradients (None) in the user's result
            return (*given, *([None] * len(user.keyword)))

        return y, grad

    return lambda x, values: custom(x, *[values[name] for name in names])


def from_spec(spec: OpSpec) -> UserFunction:
    """A declared op (a built-in, an editor op) as the function a user would have written: ``fn(x, **params)``
    calls the op's custom gradient (:meth:`OpSpec.apply`), and its undecorated forward is the declared
    forward. The checker then runs the same checks on it as on your own function."""
    names = spec.param_names

    def fn(x, **params):
        return spec.apply(x, **params)

    def inner(x, **params):
        def grad(dy):
            with tf.GradientTape() as tape:
                tape.watch(x)
                custom = spec.apply(x, **params)
            return tape.gradient(custom, x, output_gradients=dy)

        return spec.forward(x, **params), grad

    fn.__name__ = inner.__name__ = spec.key
    return UserFunction(fn=fn, inner=inner, keyword=names, positional=(), positional_defaults={}, order=("x",))


def from_function(
    fn: Callable[..., Any],
    *,
    forward: Callable[..., Any] | None = None,
    points: Iterable[Any] | None = None,
    ranges: Mapping[str, Sequence[float]] | None = None,
    title: str | None = None,
    justification: str | None = None,
    key: str | None = None,
    input_shapes: Iterable[Sequence[Sequence[int]]] | None = None,
    domain: Mapping[str, Sequence[float]] | None = None,
) -> OpSpec:
    """An :class:`OpSpec` (family "yours") for your ``@tf.custom_gradient`` function ``fn``.

    Every declaration is optional: ``forward(x, **params)`` is the plain forward whose autodiff is the
    true gradient (else: numerical, see the module docstring); ``points`` are ``(x, kind)`` or
    ``(x, kind, note)`` or :class:`ops.Point`; ``ranges`` maps a parameter to ``(low, high)``;
    ``justification`` says why the gradient is overridden (only a declaration does: fn's docstring is not
    one, see the module docstring); ``input_shapes`` the
    shape assignments to check a function of several inputs or a non-elementwise one at, one shape per
    tensor input each (``[((4, 3), (3,)), ((2, 5), (5,))]``), tried instead of :data:`SHAPE_RULES`;
    ``domain`` maps a tensor input to the ``(low, high)`` its values are drawn from (``{"scale": (0.1, 2)}``),
    for a function defined on part of the line only.
    TypeError if ``fn`` is not a custom-gradient function; ValueError for a bad declaration.
    """
    if not is_custom_gradient(fn):
        what = f"the class {fn.__name__}" if isinstance(fn, type) else f"{type(fn).__name__} {fn!r}"
        raise TypeError(
            f"ops.from_function expected a function decorated with @tf.custom_gradient (returning y and a "
            f"gradient function), got {what}"
        )
    inner = undecorated(fn)
    op_key = key or getattr(inner, "__name__", "user_op")
    signature = _signature(fn, inner)
    found = signature.params
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
        inputs=signature.inputs,
        keyword_inputs=signature.keyword_inputs,
        flags=signature.flags,
        positional_flags=signature.positional_flags,
        order=signature.order,
        input_shapes=_shapes(input_shapes, signature.inputs, op_key),
        domain=_domain(domain, signature.inputs, op_key),
    )
    declared = _points(points, op_key)
    if forward is not None:
        if not callable(forward):
            raise TypeError(f"{op_key}: forward must be a callable forward(x, **params), got {type(forward).__name__}")
        plain_forward = forward
        forward_fn = lambda x, values: tf.cast(plain_forward(x, **values), x.dtype)  # noqa: E731
    else:
        forward_fn = _numerical_forward(user, names)
    justification = "" if justification is None else str(justification)
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
