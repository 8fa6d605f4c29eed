"""Which layers of a model the watch callback records, what each one is, and how its calls are seen.

A layer is watched when it is (in this order of precedence):

* a :class:`ops.SurrogateLayer`: a catalogue op (``source="catalogue"``) or your function made an op with
  :func:`ops.from_function` (``"from_function"``); its special points and clip boundaries are the op's declared
  ones (``OpSpec.declared_points``), nothing per op here;
* any other leaf layer whose ``call`` creates a custom gradient when traced (``tf.custom_gradient`` or
  ``keras.ops.custom_gradient``: TensorFlow marks the op it overrides with ``_gradient_op_type``) - a team's own
  layer (``"yours"``), found as the checker finds custom gradients, by what the code does, not by its name;
* or, when you name layers (``layers=[...]``), exactly those (``"named"`` for one that is neither of the above).

A layer's calls are seen by replacing its ``call`` with a recording wrapper for the length of one trace
(:func:`recording`), so ``train_step``, compilation and distribution are never touched, and Sequential,
functional and subclassed models (a layer applied several times, e.g. once per time step) all work.

The *reference* backward the mismatch compares with: autodiff of the op's plain forward when it is not zero
everywhere (``SurrogateLayer(gradient="true")``'s semantics); else, for a piecewise-constant forward (a spike, a
sign, a quantiser), the derivative of the forward smoothed by a Gaussian of width ``sigma``: the sum over the
declared jumps ``x_j`` of ``height_j * N(x - x_j; 0, sigma)`` (a smooth reference the row names); a team's layer
has a reference only when you give its plain forward (``references={name: fn}``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ops.layer import SurrogateLayer
from ops.registry import OpSpec, Point

GRADIENT_OVERRIDE_ATTR = "_gradient_op_type"  # set by tf.custom_gradient on the IdentityN it overrides
REFERENCE_GRID = np.linspace(-10.0, 10.0, 4001)
LOOKED_FOR = (
    "ops.SurrogateLayer layers (catalogue ops and ops.from_function ops), and leaf layers whose call uses "
    "tf.custom_gradient or keras.ops.custom_gradient; name layers with layers=[...] to watch others"
)


@dataclass
class WatchedLayer:
    """One watched layer: what it is (for ``info.json``) and what its statistics need."""

    layer: keras.layers.Layer
    name: str
    depth: int
    source: str  # "catalogue" | "from_function" | "yours" | "named"
    spec: OpSpec | None = None
    params: dict[str, float] = field(default_factory=dict)
    points: tuple[Point, ...] = ()
    clip_bounds: tuple[float | None, float | None] | None = None
    reference: str = "none"
    reference_fn: Callable[[tf.Tensor], tf.Tensor] | None = None
    output_kind: str | None = None  # "spike" (firing rate), "sign" (flip ratio) or None; decided at the first record

    @property
    def family(self) -> str | None:
        return self.spec.family if self.spec is not None else None

    @property
    def title(self) -> str:
        return self.spec.title if self.spec is not None else type(self.layer).__name__

    def info(self) -> dict[str, Any]:
        """This layer's entry of ``info.json``'s ``layers``."""
        return {
            "name": self.name, "depth": self.depth,
            "op": self.spec.key if self.spec is not None else None,
            "params": {k: float(v) for k, v in self.params.items()},
            "special_points": [{"x": float(p.x), "kind": p.kind} for p in self.points],
            "clip_bounds": list(self.clip_bounds) if self.clip_bounds is not None else None,
            "family": self.family, "title": self.title, "source": self.source, "reference": self.reference,
            "class": type(self.layer).__name__,
        }  # fmt: skip


@dataclass
class Found:
    """The watched layers in call order, and the layers left out with the reason (one sentence each)."""

    watched: list[WatchedLayer]
    skipped: list[str]


def leaf_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """Every layer of ``model`` with no layer inside it (a SurrogateLayer is a leaf), input layers left out."""
    leaves = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if isinstance(layer, SurrogateLayer) or not list(layer._flatten_layers(include_self=False, recursive=False)):
            leaves.append(layer)
    return list(dict.fromkeys(leaves))


@contextlib.contextmanager
def recording(layers: Sequence[keras.layers.Layer], on_call: Callable[..., Any]) -> Iterator[None]:
    """Within the block, each call of one of ``layers`` runs ``on_call(layer, original_call, args, kwargs)``
    instead of its ``call`` (which it calls itself). Meant for the length of one ``tf.function`` trace: the
    traced graph keeps what the wrapper did; the layers are given back their own ``call`` on exit."""
    replaced = []
    try:
        for layer in layers:
            original = layer.call

            def wrapped(*args, _layer=layer, _original=original, **kwargs):
                return on_call(_layer, _original, args, kwargs)

            had_own = "call" in vars(layer)
            replaced.append((layer, had_own, original))
            layer.call = wrapped
        yield
    finally:
        for layer, had_own, original in replaced:
            if had_own:
                layer.call = original
            else:
                del layer.call


def _custom_gradient_in(graph: tf.Graph, operations: Sequence[tf.Operation], seen: set[str] | None = None) -> bool:
    """Whether ``operations`` (or a function they call) hold an op whose gradient ``tf.custom_gradient``
    overrides."""
    seen = set() if seen is None else seen
    for op in operations:
        if GRADIENT_OVERRIDE_ATTR in op.node_def.attr:
            return True
        for attr in ("f", "then_branch", "else_branch", "body", "cond"):
            if attr not in op.node_def.attr:
                continue
            try:
                name = op.get_attr(attr).name
                function = graph._get_function(name)
            except (ValueError, AttributeError, TypeError):
                continue
            if function is None or name in seen:
                continue
            seen.add(name)
            inner = function.graph if hasattr(function, "graph") else None
            if inner is not None and _custom_gradient_in(inner, inner.get_operations(), seen):
                return True
    return False


@dataclass
class _Call:
    layer: keras.layers.Layer
    dtype: tf.DType | None
    custom_gradient: bool


def trace_calls(model: keras.Model, inputs: Any, layers: Sequence[keras.layers.Layer]) -> list[_Call]:
    """The first call of each of ``layers`` when ``model`` runs on ``inputs`` (traced, not run), in call order:
    the dtype of its first input and whether its call creates a custom gradient."""
    calls: dict[int, _Call] = {}

    def on_call(layer, original, args, kwargs):
        graph = tf.compat.v1.get_default_graph()
        before = len(graph.get_operations())
        outputs = original(*args, **kwargs)
        if id(layer) not in calls:
            first = tf.nest.flatten(args[0])[0] if args else None
            dtype = getattr(first, "dtype", None)
            created = graph.get_operations()[before:]
            calls[id(layer)] = _Call(layer, tf.as_dtype(dtype) if dtype is not None else None,
                                     _custom_gradient_in(graph, created))  # fmt: skip
        return outputs

    def run(x):
        with recording(layers, on_call):
            model(x, training=False)
        return tf.constant(0.0)

    tf.function(run, autograph=False).get_concrete_function(tf.nest.map_structure(tf.TensorSpec.from_tensor, inputs))
    return list(calls.values())


def _clip_bounds(points: Sequence[Point]) -> tuple[float, float] | None:
    """The lowest and highest declared boundary, when the op declares two or more (one is ambiguous: no side)."""
    boundaries = sorted(p.x for p in points if p.kind == "boundary")
    return (boundaries[0], boundaries[-1]) if len(boundaries) >= 2 else None


def _autodiff_is_zero(spec: OpSpec, params: Mapping[str, float], points: Sequence[Point]) -> bool:
    near = [p.x + d for p in points for d in (-1e-3, 1e-3)]
    grid = tf.constant(np.concatenate([REFERENCE_GRID, near]), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(grid)
        y = spec.forward(grid, **params)
    gradient = tape.gradient(y, grid)
    if gradient is None:
        return True
    values = gradient.numpy()
    return not np.any(values[np.isfinite(values)] != 0)


def _smoothed(spec: OpSpec, params: Mapping[str, float], points: Sequence[Point], sigma: float):
    jumps = [p.x for p in points if p.kind == "jump"]
    heights = []
    for x in jumps:
        step = 1e-6 * max(1.0, abs(x))
        ends = spec.forward(tf.constant([x - step, x + step], tf.float64), **params).numpy()
        heights.append(float(ends[1] - ends[0]))
    pairs = [(x, h) for x, h in zip(jumps, heights, strict=True) if h != 0]
    if not pairs:
        return None
    norm = 1.0 / (sigma * math.sqrt(2.0 * math.pi))

    @tf.custom_gradient
    def smoothed(x):
        y = spec.forward(x, **params)

        def grad(dy):
            density = tf.zeros_like(x)
            for centre, height in pairs:
                z = (x - tf.cast(centre, x.dtype)) / tf.cast(sigma, x.dtype)
                density += tf.cast(height * norm, x.dtype) * tf.exp(-0.5 * tf.square(z))
            return dy * density

        return y, grad

    return smoothed


def reference_for(spec: OpSpec, params: Mapping[str, float], points: Sequence[Point], sigma: float):
    """``(name, fn)``: the reference backward of an op (see the module docstring); fn is None when there is none."""
    if not _autodiff_is_zero(spec, params, points):
        return spec.true_gradient, lambda x: spec.forward(x, **params)
    smoothed = _smoothed(spec, params, points, sigma)
    if smoothed is None:
        return "none: the true gradient is zero everywhere and the op declares no jump", None
    return f"smoothed forward (Gaussian, sigma={sigma:g})", smoothed


def find(
    model: keras.Model,
    inputs: Any,
    names: Sequence[str] | None = None,
    references: Mapping[str, Callable[[tf.Tensor], tf.Tensor]] | None = None,
    sigma: float = 0.5,
) -> Found:
    """The layers of ``model`` to watch (module docstring), in the order the model first calls them on
    ``inputs``. ValueError for a named layer the model does not have; a layer whose inputs are not floating
    point is left out and named in ``skipped``."""
    references = dict(references or {})
    leaves = leaf_layers(model)
    by_name = {layer.name: layer for layer in leaves}
    if names is not None:
        unknown = [name for name in names if name not in by_name]
        if unknown:
            raise ValueError(
                f"layers {', '.join(map(repr, unknown))} are not in model {model.name!r}; its layers: "
                + ", ".join(by_name)
            )
    unknown_refs = sorted(set(references) - set(by_name))
    if unknown_refs:
        raise ValueError(f"references name layers the model does not have: {', '.join(unknown_refs)}")
    calls = trace_calls(model, inputs, leaves)
    watched, skipped = [], []
    for call in calls:
        layer = call.layer
        wanted = (layer.name in names) if names is not None else (isinstance(layer, SurrogateLayer) or call.custom_gradient)
        if not wanted:
            continue
        if call.dtype is None or not call.dtype.is_floating:
            what = call.dtype.name if call.dtype is not None else "non-tensor"
            skipped.append(f"layer {layer.name!r} takes {what} inputs, not floating point: skipped")
            continue
        entry = WatchedLayer(layer=layer, name=layer.name, depth=len(watched), source="yours" if call.custom_gradient else "named")
        if isinstance(layer, SurrogateLayer):
            spec = layer.spec
            entry.spec, entry.params = spec, dict(layer.params)
            entry.source = "from_function" if spec.user_function is not None or not spec.builtin else "catalogue"
            dtype = call.dtype.name if call.dtype.name in ("float16", "bfloat16", "float32", "float64") else "float32"
            entry.points = tuple(spec.points(-math.inf, math.inf, dtype, **entry.params))
            entry.clip_bounds = _clip_bounds(entry.points)
            entry.reference, entry.reference_fn = reference_for(spec, entry.params, entry.points, sigma)
            entry.output_kind = {"spike": "spike", "sign": "sign"}.get(spec.family)
        if layer.name in references:
            plain = references[layer.name]
            entry.reference, entry.reference_fn = "autodiff of your forward", plain
        elif entry.spec is None:
            entry.reference = "none: give the layer's plain forward in references={name: fn} for a mismatch"
        watched.append(entry)
    return Found(watched, skipped)
