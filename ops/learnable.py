r"""Learnable op parameters: a parameter as a trained variable, its gradient read from the op's declaration.

The custom gradient of a step stands in for a smooth primitive :math:`\sigma_\varphi`: the backward
multiplies ``dy`` by the declared surrogate :math:`g_\varphi(x) = \partial\sigma_\varphi/\partial x`. A learnable
parameter :math:`\varphi` gets the same primitive's derivative in it, :math:`dy\,\partial\sigma_\varphi(x)/\partial\varphi`,
with the primitive anchored at the op's jump :math:`a` (where it crosses the step's midpoint whatever
:math:`\varphi`): :math:`\sigma_\varphi(x) = \sigma(a) + \int_a^x g_\varphi(s)\,ds`.

* The **location** (the parameter the jump moves with one for one: a spike op's ``threshold``):
  :math:`\partial\sigma/\partial\theta = -g(x)`, exactly, with no derivative of ``g``: the gradient a bias
  before the op gets, with the opposite sign.
* Any other parameter: :math:`\int_a^x \partial g_\varphi(s)/\partial\varphi\,ds`, autodiff of the declared
  surrogate in :math:`\varphi`, integrated by Gauss-Legendre quadrature on geometric panels (each panel half
  the next, down to :math:`2^{-14}` of the way), so a surrogate of any width is resolved near the jump.

:func:`why_not` reads from the declaration which parameters qualify and says why the others cannot; no op
is edited for it. :func:`kind` names the equivalence a parameter has, where one holds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from ops.registry import OpSpec, as_float_tensor, compute_dtype, get

PANELS = 14  # geometric panels [2^-(k+1), 2^-k] of the way from the jump to x, plus [0, 2^-14]
NODES_PER_PANEL = 8
PROBE = np.linspace(-2.5, 2.5, 41)  # where a surrogate's dependence on a parameter is probed
KINDS = ("location", "gain", "height", "shape")  # see kind()


def _nodes() -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes in (0, 1] and weights summing to 1: Gauss-Legendre on each geometric panel."""
    points, weights = np.polynomial.legendre.leggauss(NODES_PER_PANEL)
    edges = [0.0, *(2.0 ** -k for k in range(PANELS, -1, -1))]
    nodes, node_weights = [], []
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        nodes.append(low + (high - low) * (points + 1.0) / 2.0)
        node_weights.append((high - low) * weights / 2.0)
    return np.concatenate(nodes), np.concatenate(node_weights)


NODES, WEIGHTS = _nodes()


def _points(spec: OpSpec, values: Mapping[str, float], kind: str) -> list[float]:
    return sorted(p.x for p in spec.declared_points(values, "float32") if p.kind == kind)


def _surrogate_numpy(spec: OpSpec, x: np.ndarray, values: Mapping[str, float]) -> np.ndarray:
    tensors = {k: tf.constant(v, tf.float64) for k, v in values.items()}
    return spec.surrogate(tf.constant(x, tf.float64), tensors).numpy()


def _scaled(spec: OpSpec, anchor: float, values: Mapping[str, float], name: str, factor: float, gain: bool) -> bool:
    """Whether g at ``name * factor`` is ``factor * g(factor * u)`` (gain) or ``factor * g(u)`` (height)."""
    moved = {**values, name: values[name] * factor}
    inner = PROBE * factor if gain else PROBE
    return bool(np.allclose(_surrogate_numpy(spec, PROBE + anchor, moved),
                            factor * _surrogate_numpy(spec, inner + anchor, values), rtol=1e-9, atol=1e-12))


@functools.lru_cache(maxsize=256)
def _analysis(spec: OpSpec) -> tuple[dict[str, tuple[str | None, str | None]], str | None, float]:
    """Per parameter ``(kind, None)`` if learnable, else ``(None, why not)``; the location parameter (or
    None); the anchor's offset from it (or the fixed anchor when there is no location)."""
    found: dict[str, tuple[str | None, str | None]] = {}
    if spec.custom_fn is not None:
        why = "its backward is your own function's: the parameter's gradient would have to come from it"
        return dict.fromkeys(spec.param_names, (None, why)), None, 0.0
    if spec.surrogate is None:
        why = "its backward acts on the upstream gradient itself: there is no surrogate g(x) to integrate"
        return dict.fromkeys(spec.param_names, (None, why)), None, 0.0
    defaults = spec.defaults()
    jumps = _points(spec, defaults, "jump")
    if len(jumps) != 1:
        why = ("its forward is continuous: the parameter changes only the backward of the function trained, so the "
               "loss has no gradient in it" if not jumps else f"its forward has {len(jumps)} jumps, not one step")
        return dict.fromkeys(spec.param_names, (None, why)), None, 0.0
    location = None
    for param in spec.params:
        if param.integer:
            found[param.name] = (None, "it is a whole number: no gradient step can change it")
            continue
        step = (param.high - param.low) * 1e-3
        moved = {**defaults, param.name: param.default + step if param.default + step <= param.high else param.default - step}
        moved_jumps = _points(spec, moved, "jump")
        if len(moved_jumps) == 1 and math.isclose(moved_jumps[0] - jumps[0], moved[param.name] - param.default, rel_tol=1e-6):
            location, found[param.name] = param.name, ("location", None)
            continue
        if moved_jumps != jumps:
            found[param.name] = (None, "it moves the forward's jump: the forward itself depends on it")
            continue
        factor = 1.25 if param.default * 1.25 <= param.high else 0.8
        if param.default > 0 and _scaled(spec, jumps[0], defaults, param.name, factor, gain=True):
            found[param.name] = ("gain", None)
            continue
        if _points(spec, defaults, "boundary"):
            found[param.name] = (None, "the surrogate is a box (it jumps at declared boundaries) and not a gain family: "
                                 "its derivative in the parameter jumps or is a Dirac there, out of the quadrature's reach")
            continue
        if _points(spec, moved, "kink") != _points(spec, defaults, "kink"):
            found[param.name] = (None, "the surrogate has corners that move with it: its derivative in it jumps there")
            continue
        if np.array_equal(_surrogate_numpy(spec, PROBE + jumps[0], moved), _surrogate_numpy(spec, PROBE + jumps[0], defaults)):
            found[param.name] = (None, "the surrogate does not depend on it")
            continue
        height = param.default > 0 and _scaled(spec, jumps[0], defaults, param.name, factor, gain=False)
        found[param.name] = ("height" if height else "shape", None)
    offset = jumps[0] - (defaults[location] if location is not None else 0.0)
    return found, location, offset


def why_not(op: str | OpSpec) -> dict[str, str | None]:
    """Every parameter of ``op``: None if it can be learned, else the reason it cannot."""
    return {name: reason for name, (_, reason) in _analysis(get(op))[0].items()}


def learnable(op: str | OpSpec) -> tuple[str, ...]:
    """The parameters of ``op`` that can be learned (declaration order)."""
    return tuple(name for name, reason in why_not(op).items() if reason is None)


EQUIVALENCES = {
    "location": "learning it is learning a bias before the op with the opposite sign: the forward depends on "
    "x - {name}, so dL/d{name} = -(sum of dL/db over the layer's units), and a Dense bias can already do it",
    "gain": "a gain: g_k(u) = k f(k u), so the backward reads the op's input scaled by {name}; learning it is learning "
    "a gain on the pre-activation in the backward pass only: dL/d{name} = (1/{name}) sum u dL/du (u = x - jump)",
    "height": "a height: g_h = h f(u) scales every gradient through the op, like a learning-rate factor for "
    "everything before it: dL/d{name} = (1/{name}) sum dy (sigma(x) - sigma(jump))",
    "shape": "no simpler equivalent: it changes the surrogate's shape",
}


def kind(op: str | OpSpec, name: str) -> str:
    """What a learnable parameter is (read numerically from the surrogate at the defaults), one of :data:`KINDS`:
    ``location`` (the jump moves with it), ``gain`` (:math:`g_k(u) = k f(k u)`), ``height``
    (:math:`g_h = h f(u)`) or ``shape``. :data:`EQUIVALENCES` says what learning each amounts to."""
    spec = get(op)
    found = _analysis(spec)[0]
    if name not in found or found[name][0] is None:
        raise ValueError(f"{spec.key}: parameter {name!r} is not learnable ({found.get(name, (None, 'no such parameter'))[1]})")
    return found[name][0]


def primitive_derivative(spec: OpSpec, x: tf.Tensor, values: Mapping[str, tf.Tensor], names: Collection[str],
                         upstream: tf.Tensor) -> list[tf.Tensor]:
    """:math:`\\sum dy\\,\\partial\\sigma(x)/\\partial\\varphi` for each name (scalars, ``x``'s dtype)."""
    found, location, offset = _analysis(spec)
    anchor = tf.constant(offset, x.dtype) + (values[location] if location is not None else 0.0)
    distance = x - anchor
    results: dict[str, tf.Tensor] = {}
    for name in names:
        if found[name][0] == "location":  # d sigma(x - theta)/d theta = -g
            results[name] = -tf.reduce_sum(upstream * spec.surrogate(x, values))
        elif found[name][0] == "gain":  # sigma = F(k u): d sigma/dk = u g(u) / k
            results[name] = tf.reduce_sum(upstream * distance * spec.surrogate(x, values)) / values[name]
    shaped = [name for name in names if found[name][0] in ("height", "shape")]
    if shaped:
        nodes = tf.constant(NODES, x.dtype)
        weights = tf.constant(WEIGHTS, x.dtype)
        along = anchor + distance[..., None] * nodes  # every quadrature node between the jump and x
        watched = [tf.identity(values[name]) for name in shaped]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            surrogate = spec.surrogate(along, {**values, **dict(zip(shaped, watched, strict=True))})
            total = tf.reduce_sum(surrogate * weights * (upstream * distance)[..., None])
        for name, gradient in zip(shaped, tape.gradient(total, watched), strict=True):
            results[name] = tf.zeros((), x.dtype) if gradient is None else gradient
    return [results[name] for name in names]


@functools.lru_cache(maxsize=256)
def _custom(spec: OpSpec, learn: tuple[str, ...]):
    names = spec.param_names

    @tf.custom_gradient
    def custom(x, *param_values):
        values = dict(zip(names, param_values, strict=True))
        y = spec.forward_fn(x, values)

        def grad(dy):
            dx = dy * spec.surrogate(x, values)
            learned = dict(zip(learn, primitive_derivative(spec, x, values, learn, dy), strict=True))
            return (dx, *(learned.get(name) for name in names))

        return y, grad

    return custom


def apply(op: str | OpSpec, x: Any, learn: Collection[str], params: Mapping[str, Any] | None = None) -> tf.Tensor:
    """``op``'s forward with its custom gradient in ``x`` and, for each parameter in ``learn``, the gradient
    of its primitive (module docstring). Parameters may be tensors or variables; ValueError names a parameter
    that cannot be learned and why."""
    spec = get(op)
    reasons = why_not(spec)
    for name in learn:
        if name not in reasons:
            raise ValueError(f"{spec.key} has no parameter {name!r}; parameters: {', '.join(spec.param_names) or 'none'}")
        if reasons[name] is not None:
            raise ValueError(f"{spec.key}: parameter {name!r} cannot be learned: {reasons[name]}")
    x = as_float_tensor(x)
    compute = tf.as_dtype(compute_dtype(x.dtype))
    values = spec.resolve(params or {})
    tensors = [
        tf.cast(values[name], compute) if isinstance(values[name], (tf.Tensor, tf.Variable)) else tf.constant(values[name], compute)
        for name in spec.param_names
    ]
    ordered = tuple(name for name in spec.param_names if name in learn)
    return tf.cast(_custom(spec, ordered)(tf.cast(x, compute), *tensors), x.dtype)
