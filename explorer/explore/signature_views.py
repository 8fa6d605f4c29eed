"""Views of a custom-gradient function of any signature as a one-input op the sweeps can draw.

A function that is one input, one output, elementwise is swept as it is (:mod:`explorer.explore.sweeps`).
Every other one becomes a *view op*: an :class:`ops.OpSpec` of one variable whose forward, true gradient
and custom gradient are the three panels, so sweeps, special points, figures and metrics apply unchanged.

* **Curve** (:data:`CURVE`), for a function elementwise in every input (``grad_reverse(x, lam)``,
  ``sin_cos(x)``): input ``swept`` runs over the sweep, every other input is filled with its slider
  value (a view parameter, so a slider move does not retrace). The forward is the chosen output; the
  gradient panels are the derivative of that output with respect to input ``wrt`` along the sweep (the
  Jacobian is diagonal, so one backward call gives every point's).
* **Line** (:data:`LINE`), for anything else (a norm, a matrix product): the swept input moves along
  ``x(t) = x0 + t·u`` (x0 uniform in [-2, 2], or [0.1, 2] where the forward needs positive inputs, or 0
  with ``origin``; u a normal draw scaled to unit length; both from ``seed``), a scalar input is a slider,
  a tensor-shaped input is fixed at a uniform draw from the same seed. The forward panel is
  ``s(t) = ⟨w, f(x(t))⟩`` with w all ones (on the chosen output, zeros on the others), the true gradient
  ds/dt (autodiff of a declared plain forward, else a float64 central difference of s), the custom
  gradient ``⟨custom backward(w), u⟩``.

Several outputs: ``output`` is the index of the output shown, or :data:`SUM_OF_OUTPUTS` for their sum
(upstream 1 on every output).

Which inputs a function accepts is found by :func:`ops.inputs.find_inputs` (its ``SHAPE_RULES`` or the declared
``input_shapes``), as the checker finds them; :func:`find_layout` takes the :class:`ops.inputs.Found` or finds
it, and decides elementwise.
Building a view op never calls the user's code (the server builds them for titles and labels); every
call happens in the worker (:mod:`explorer.loaded`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import tensorflow as tf

import ops
from ops.inputs import Found, as_list, find_inputs, no_inputs_message, shape_text

CURVE, LINE = "curve", "line"
SUM_OF_OUTPUTS = -1
DEFAULT_INPUT_RANGE = (-2.0, 2.0)  # a scalar input's slider without a declared range (the checker's values)
DEFAULT_INPUT_VALUE = 1.0
NUMERICAL_STEP = 1e-5  # relative, float64 central difference (as ops.user)
MAX_OUTPUTS = 8


@dataclass(frozen=True)
class Layout:
    """What a loaded function looks like, found once in the worker by calling it."""

    inputs: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]  # the first input assignment that works (the line view's shapes)
    outputs: int  # how many output tensors
    elementwise: bool  # every output elementwise in every input (inputs of one shape)
    positive: bool  # the forward needs inputs in [0.1, 2] (NaN somewhere in [-2, 2])
    dtype: str  # the widest dtype forward and backward run in
    failure: str | None = None  # no input assignment works: why
    reads_variables: bool = False  # the forward reads a tf.Variable (its backward takes variables=)

    @property
    def simple(self) -> bool:
        """One input, one output, elementwise, no variable read: swept as it is, no view op needed."""
        return len(self.inputs) == 1 and self.outputs == 1 and self.elementwise and not self.reads_variables

    def describe(self) -> str:
        """A sentence for the page: what was detected."""
        if self.failure is not None:
            return self.failure
        shapes = ", ".join(f"{name} {shape_text(shape)}" for name, shape in zip(self.inputs, self.shapes, strict=True))
        outputs = f"{self.outputs} outputs" if self.outputs > 1 else "one output"
        if self.elementwise:
            return f"elementwise in every input ({len(self.inputs)} input(s), {outputs}): drawn as curves"
        return (
            f"not elementwise (its Jacobian is not diagonal; inputs accepted: {shapes}; {outputs}): drawn along "
            "a line through input space"
        )


@dataclass(frozen=True)
class View:
    """The choices of a view: which input is swept, the gradient with respect to which input, which output,
    and the line's seed and whether it goes through the origin."""

    kind: str = CURVE
    swept: str = ""
    wrt: str = ""
    output: int = 0
    seed: int = 0
    origin: bool = False


def _call_inner(user, inputs: Sequence[tf.Tensor], values: Mapping[str, tf.Tensor]) -> tuple[list[tf.Tensor], Any]:
    params = {name: values[name] for name in (*user.positional, *user.keyword) if name in values}
    y, backward = user._call_inner(inputs, params, {})
    return as_list(y), backward


def _backward(backward, upstreams: Sequence[tf.Tensor]) -> list[Any]:
    """The user's backward on one upstream per output; the input gradients (a ``variables=`` backward's
    variable gradients are dropped: the views show input gradients)."""
    try:
        takes_variables = "variables" in inspect.signature(backward).parameters
    except (TypeError, ValueError):
        takes_variables = False
    result = backward(*upstreams, variables=[]) if takes_variables else backward(*upstreams)
    if takes_variables and isinstance(result, (list, tuple)) and len(result) == 2:
        result = result[0]
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _with_variables(grads: tuple, variables: Any) -> Any:
    """A view's gradients, plus ``None`` per variable when TensorFlow passed the variables the forward read
    (it then requires ``variables=`` and one gradient each; the views show input gradients only)."""
    return grads if variables is None else (grads, [None] * len(variables))


def _gradient_index(user, name: str) -> int | None:
    """Where input ``name``'s gradient is in the backward's result (positional arguments in order)."""
    positional = [
        n for n in user.order
        if (n in user.inputs and n not in user.keyword_inputs) or n in user.positional or n in user.positional_flags
    ]
    return positional.index(name) if name in positional else None


def _weights(outputs: Sequence[tf.Tensor], output: int) -> list[tf.Tensor]:
    return [
        tf.ones_like(y) if output in (SUM_OF_OUTPUTS, index) else tf.zeros_like(y) for index, y in enumerate(outputs)
    ]


def _chosen(outputs: Sequence[tf.Tensor], output: int) -> tf.Tensor:
    if output == SUM_OF_OUTPUTS:
        return tf.add_n(list(outputs))
    return outputs[output]


# -- finding the layout (calls the user's code: in the worker) ------------------------------------------------
def _elementwise(user, params: Mapping[str, float]) -> tuple[bool, int]:
    """(every output elementwise in every input, number of outputs) with every input a vector of 7 numbers:
    the forward agrees with itself on a prefix, reversed, and as a (2, 3) matrix."""
    columns = [np.linspace(-1.7, 1.9, 7) * (1 + 0.3 * i) + 0.1 * i for i in range(len(user.inputs))]
    outputs_seen = 1
    for dtype in ("float64", "float32"):
        values = {k: tf.constant(v, dtype) for k, v in params.items()}

        def forward(pieces: Sequence[np.ndarray], dtype: str = dtype, values: dict = values) -> list[np.ndarray]:
            y = user.forward_all([tf.constant(p, dtype) for p in pieces], values)
            return [np.asarray(o.numpy(), np.float64) for o in as_list(y)]

        try:
            full = forward(columns)
        except Exception:  # noqa: BLE001 - try float32, then: not elementwise
            continue
        outputs_seen = len(full)
        if any(y.shape != (7,) for y in full):
            return False, outputs_seen
        tries = (
            ([c[:3] for c in columns], [y[:3] for y in full]),
            ([c[::-1] for c in columns], [y[::-1] for y in full]),
            ([c[:6].reshape(2, 3) for c in columns], [y[:6].reshape(2, 3) for y in full]),
        )
        try:
            for pieces, expected in tries:
                got = forward(pieces)
                if len(got) != len(expected) or not all(
                    g.shape == e.shape and np.allclose(g, e, equal_nan=True, rtol=1e-6, atol=1e-9)
                    for g, e in zip(got, expected, strict=True)
                ):
                    return False, outputs_seen
        except Exception:  # noqa: BLE001 - refuses a piece of the vector: not elementwise
            return False, outputs_seen
        return True, outputs_seen
    return False, outputs_seen


def find_layout(spec: ops.OpSpec, found: Found | None = None) -> Layout:
    """What the function looks like, from the input assignments it accepts (``found``, found here at its default
    parameters when not given); when none works, a Layout whose ``failure`` says why. Calls the user's code:
    run it in the worker."""
    user = spec.user_function
    params = spec.defaults()
    if found is None:
        found = find_inputs(user, lambda inputs: user.call_all(inputs, params))
    if not found.working:
        return Layout(user.inputs, (), 0, False, False, "float32", f"{spec.key}: {no_inputs_message(user, found)}")
    first = found.working[0]
    elementwise, count = _elementwise(user, params)
    reads = False
    try:
        with tf.GradientTape() as tape:
            outputs = as_list(user.forward_all([tf.constant(v, first.dtype) for v in first.values(0)], params))
        count = len(outputs)
        reads = bool([v for v in tape.watched_variables() if v.trainable])
    except Exception:  # noqa: BLE001 - ran in find_inputs; keep what _elementwise saw
        pass
    return Layout(user.inputs, first.shapes, min(count, MAX_OUTPUTS), elementwise, first.positive, first.dtype, None, reads)


# -- the line -------------------------------------------------------------------------------------------------
def line(layout: Layout, swept: str, seed: int, origin: bool = False) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(x0, u, fixed): the line's start and unit direction in the swept input's shape, and a seeded value
    for every other tensor-shaped input (a scalar input is a slider and is not here)."""
    rng = np.random.default_rng(seed)
    low = 0.1 if layout.positive else -2.0
    shapes = dict(zip(layout.inputs, layout.shapes, strict=True))
    shape = shapes[swept]
    x0 = np.zeros(shape) if origin else rng.uniform(low, 2.0, size=shape)
    u = rng.normal(size=shape)
    u = u / np.linalg.norm(u) if np.linalg.norm(u) > 0 else np.ones(shape)
    fixed = {name: rng.uniform(low, 2.0, size=s) for name, s in shapes.items() if name != swept and len(s) > 0}
    return x0, u, fixed


def slider_inputs(layout: Layout, view: View) -> tuple[str, ...]:
    """The inputs shown as sliders: every input but the swept one on a curve; the scalar ones on a line."""
    if view.kind == CURVE:
        return tuple(name for name in layout.inputs if name != view.swept)
    shapes = dict(zip(layout.inputs, layout.shapes, strict=True))
    return tuple(name for name in layout.inputs if name != view.swept and len(shapes[name]) == 0)


def input_param(name: str, declared: Sequence[float] | None = None) -> ops.Param:
    """A slider for scalar input ``name``: its declared ``(low, high)``, else :data:`DEFAULT_INPUT_RANGE`;
    the default :data:`DEFAULT_INPUT_VALUE` clamped into the range."""
    low, high = (float(declared[0]), float(declared[1])) if declared is not None else DEFAULT_INPUT_RANGE
    default = min(max(DEFAULT_INPUT_VALUE, low), high)
    return ops.Param(name, default, low, high, "an input of your function, held at this value")


def held_name(name: str) -> str:
    """The view op's parameter for input ``name`` held at a slider value: the name itself, except ``x``
    (``OpSpec.forward(x, **params)`` takes x), which is ``x_held``."""
    return "x_held" if name == "x" else name


def default_view(layout: Layout) -> View:
    swept = layout.inputs[0]
    return View(CURVE if layout.elementwise else LINE, swept, swept, 0 if layout.outputs >= 1 else SUM_OF_OUTPUTS)


def validate_view(layout: Layout, view: View) -> View:
    """``view`` with each choice that does not fit this function replaced by its default (ValueError never)."""
    base = default_view(layout)
    swept = view.swept if view.swept in layout.inputs else base.swept
    wrt = view.wrt if view.wrt in layout.inputs else swept
    if base.kind == LINE:
        wrt = swept  # along a line: the derivative with respect to the swept input's direction
    output = view.output if view.output == SUM_OF_OUTPUTS or 0 <= view.output < max(layout.outputs, 1) else 0
    return View(base.kind, swept, wrt, output, int(view.seed), bool(view.origin))


# -- the view op (built anywhere; called only in the worker) ---------------------------------------------------
def view_spec(
    spec: ops.OpSpec, layout: Layout, view: View, input_ranges: Mapping[str, Sequence[float]] | None = None
) -> ops.OpSpec:
    """The one-variable op whose forward, true and custom gradient are the view's three panels (see the module
    docstring); its parameters are the function's own followed by the slider inputs."""
    view = validate_view(layout, view)
    user = spec.user_function
    ranges = dict(input_ranges or {})
    sliders = slider_inputs(layout, view)
    params = (*spec.params, *(replace(input_param(name, ranges.get(name)), name=held_name(name)) for name in sliders))
    names = tuple(p.name for p in params)
    output_name = "" if layout.outputs <= 1 else (" (sum of the outputs)" if view.output == SUM_OF_OUTPUTS else f" (output {view.output})")
    if view.kind == CURVE:
        forward_fn, custom_fn = _curve_functions(spec, user, layout, view, names)
        title = f"{spec.title}{output_name} vs {view.swept}" + (f", gradient w.r.t. {view.wrt}" if view.wrt != view.swept else "")
        true_gradient = "numerical"  # a central difference of the forward in every input held fixed
    else:
        forward_fn, custom_fn, true_gradient = _line_functions(spec, user, layout, view, sliders, names)
        title = f"{spec.title}{output_name} along {view.swept}(t) = {view.swept}₀ + t·u: s(t) = ⟨w, f⟩"
    return ops.OpSpec(
        key=spec.key,
        title=title,
        family=spec.family,
        params=params,
        forward_fn=forward_fn,
        surrogate=None,
        custom_fn=custom_fn,
        forward_tex="",
        grad_tex="",
        why=spec.why,
        reference=spec.reference,
        builtin=False,
        true_gradient=true_gradient,
        user_function=None,  # not the user's function itself: a view of it
    )


def _curve_functions(spec, user, layout: Layout, view: View, names: tuple[str, ...]):
    own = spec.param_names
    wrt_index = _gradient_index(user, view.wrt)

    def inputs_at(x: tf.Tensor, values: Mapping[str, tf.Tensor]) -> list[tf.Tensor]:
        return [
            x if name == view.swept else tf.fill(tf.shape(x), tf.cast(values[held_name(name)], x.dtype)) for name in user.inputs
        ]

    def own_values(values: Mapping[str, tf.Tensor], dtype) -> dict[str, tf.Tensor]:
        return {name: tf.cast(values[name], dtype) for name in own}

    def forward_values(x: tf.Tensor, values: Mapping[str, tf.Tensor]) -> tf.Tensor:
        outputs, _ = _call_inner(user, inputs_at(x, values), own_values(values, x.dtype))
        return tf.cast(_chosen(outputs, view.output), x.dtype)

    @tf.custom_gradient
    def numerical(x, *param_values):
        values = dict(zip(names, param_values, strict=True))
        y = forward_values(x, values)

        def grad(dy, variables=None):  # variables: a forward that reads one (its gradient is not shown: None)
            wide = tf.float64 if layout.dtype == "float64" else tf.float32  # float32: a variable of that dtype
            x64 = tf.cast(x, wide)
            values64 = {k: tf.cast(v, wide) for k, v in values.items()}
            inputs = inputs_at(x64, values64)
            index = user.inputs.index(view.wrt)
            at = inputs[index]
            relative = NUMERICAL_STEP if wide == tf.float64 else 1e-3
            step = relative * tf.maximum(tf.constant(1.0, wide), tf.abs(at))
            moved = []
            for sign in (1.0, -1.0):
                shifted = list(inputs)
                shifted[index] = at + sign * step
                outputs, _ = _call_inner(user, shifted, own_values(values64, wide))
                moved.append(tf.cast(_chosen(outputs, view.output), wide))
            derivative = (moved[0] - moved[1]) / (2 * step)
            return _with_variables((tf.cast(tf.cast(dy, wide) * derivative, dy.dtype), *([None] * len(param_values))), variables)

        return y, grad

    @tf.custom_gradient
    def custom(x, *param_values):
        values = dict(zip(names, param_values, strict=True))
        outputs, backward = _call_inner(user, inputs_at(x, values), own_values(values, x.dtype))
        y = tf.cast(_chosen(outputs, view.output), x.dtype)

        def grad(dy, variables=None):
            upstreams = [w * tf.cast(dy, w.dtype) for w in _weights(outputs, view.output)]
            grads = _backward(backward, upstreams)
            found = grads[wrt_index] if wrt_index is not None and wrt_index < len(grads) else None
            found = tf.zeros_like(x) if found is None else tf.cast(tf.broadcast_to(found, tf.shape(x)), x.dtype)
            return _with_variables((found, *([None] * len(param_values))), variables)

        return y, grad

    forward_fn = lambda x, values: numerical(x, *[values[name] for name in names])  # noqa: E731
    custom_fn = lambda x, values: custom(x, *[values[name] for name in names])  # noqa: E731
    return forward_fn, custom_fn


def _line_functions(spec, user, layout: Layout, view: View, sliders: tuple[str, ...], names: tuple[str, ...]):
    own = spec.param_names
    x0, u, fixed = line(layout, view.swept, view.seed, view.origin)
    index = _gradient_index(user, view.swept)
    declared = spec.true_gradient == "autodiff" and len(user.inputs) == 1

    def inputs_at(t: tf.Tensor, values: Mapping[str, tf.Tensor], dtype) -> list[tf.Tensor]:
        inputs = []
        for name in user.inputs:
            if name == view.swept:
                inputs.append(tf.constant(x0, dtype) + tf.cast(t, dtype) * tf.constant(u, dtype))
            elif name in fixed:
                inputs.append(tf.constant(fixed[name], dtype))
            else:
                inputs.append(tf.cast(values[held_name(name)], dtype))
        return inputs

    def own_values(values, dtype):
        return {name: tf.cast(values[name], dtype) for name in own}

    def s_and_custom(t: tf.Tensor, values, dtype) -> tuple[tf.Tensor, tf.Tensor]:
        """s(t) and ⟨custom backward(w), u⟩ at one t, in ``dtype``."""
        outputs, backward = _call_inner(user, inputs_at(t, values, dtype), own_values(values, dtype))
        weights = _weights(outputs, view.output)
        s = tf.add_n([tf.reduce_sum(tf.cast(w * y, dtype)) for w, y in zip(weights, outputs, strict=True)])
        grads = _backward(backward, weights)
        g = grads[index] if index is not None and index < len(grads) else None
        c = tf.zeros([], dtype) if g is None else tf.reduce_sum(tf.cast(g, dtype) * tf.constant(u, dtype))
        return s, c

    def mapped(t_values: tf.Tensor, values, dtype) -> tuple[tf.Tensor, tf.Tensor]:
        # pfor vectorises the per-t calls (one batched call); a function it cannot vectorise runs as a loop
        return tf.vectorized_map(lambda t: s_and_custom(t, values, dtype), t_values, fallback_to_while_loop=True, warn=False)

    def s_only(t_values, values, dtype):
        return mapped(t_values, values, dtype)[0]

    if declared:
        plain = spec.forward_fn

        def forward_fn(t, values):
            def one(t_one):
                x = tf.constant(x0, t.dtype) + t_one * tf.constant(u, t.dtype)
                y = plain(x, {name: tf.cast(values[name], t.dtype) for name in own})
                return tf.reduce_sum(tf.cast(y, t.dtype))

            return tf.map_fn(one, t, fn_output_signature=t.dtype)
    else:
        @tf.custom_gradient
        def numerical(t, *param_values):
            values = dict(zip(names, param_values, strict=True))
            s = s_only(t, values, t.dtype)

            def grad(dy, variables=None):
                wide = "float64" if layout.dtype == "float64" else "float32"
                t64 = tf.cast(t, wide)
                step = (NUMERICAL_STEP if wide == "float64" else 1e-3) * tf.maximum(tf.constant(1.0, wide), tf.abs(t64))
                rise = s_only(t64 + step, values, wide) - s_only(t64 - step, values, wide)
                derivative = rise / (2 * step)
                return _with_variables((tf.cast(tf.cast(dy, wide) * derivative, dy.dtype), *([None] * len(param_values))), variables)

            return s, grad

        forward_fn = lambda t, values: numerical(t, *[values[name] for name in names])  # noqa: E731

    @tf.custom_gradient
    def custom(t, *param_values):
        values = dict(zip(names, param_values, strict=True))
        s, c = mapped(t, values, t.dtype)

        def grad(dy, variables=None):
            return _with_variables((dy * c, *([None] * len(param_values))), variables)

        return s, grad

    custom_fn = lambda t, values: custom(t, *[values[name] for name in names])  # noqa: E731
    return forward_fn, custom_fn, "autodiff" if declared else "numerical"


DIFFER_TOLERANCE = {"rtol": 1e-3, "atol": 1e-5}  # float32 sweeps, float64 central differences


def disagreements(x: np.ndarray, true: np.ndarray, custom: np.ndarray) -> tuple[tuple[float, float], ...]:
    """The x intervals (consecutive rows) where the custom gradient differs from the true one beyond
    :data:`DIFFER_TOLERANCE` (NaN equal to NaN; one finite and the other not is a difference). A single row
    is left out: at a jump or kink the two conventions may differ at the point itself (the points table
    says which)."""
    x, true, custom = (np.asarray(a, np.float64) for a in (x, true, custom))
    with np.errstate(invalid="ignore"):
        same = np.isclose(custom, true, equal_nan=True, **DIFFER_TOLERANCE)
    differ = ~same
    runs: list[tuple[float, float]] = []
    start = None
    for index, flag in enumerate(np.append(differ, False)):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            if index - start > 1:
                runs.append((float(x[start]), float(x[index - 1])))
            start = None
    return tuple(runs)
