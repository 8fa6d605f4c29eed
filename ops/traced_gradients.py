"""Give back what ``tf.custom_gradient`` keeps for every graph it was traced into, once that graph's model is gone.

In a ``tf.function`` (graph mode), each call of a ``tf.custom_gradient`` function registers a new gradient function
under a fresh name (``CustomGradient-<n>``) in TensorFlow's process-wide gradient registry and never removes it.
That function's closure holds the op's inputs, so the registry keeps the whole traced graph alive: measured with the
Train page's default session (two runs of a 16-unit network, 300 epochs), about 5 MiB per session on TensorFlow 2.21,
and ``keras.backend.clear_session()`` does not release it. A server that trains a new model for every user and
every Start grows without end.

:func:`release` removes the entries whose graph captured one of the given variables: those graphs belong to models
that are being discarded, so nothing can ask for their gradients again. Entries of other graphs (another user's
model training at the same moment, an Explore sweep compiled once per op) are not touched. TensorFlow's registry is
private API; if its shape changes, :func:`release` removes nothing and says so in its return value (0).
"""

from __future__ import annotations

from collections.abc import Iterable

import tensorflow as tf

CUSTOM_GRADIENT_PREFIX = "CustomGradient-"  # the names tf.custom_gradient's graph mode registers
CLOSURE_DEPTH = 4  # how deep into nested closures (our grad_fn, then its helpers) a graph tensor is looked for


def _registry() -> dict | None:
    """TensorFlow's gradient registry, name -> {"type": function, ...}; None if this TensorFlow has none."""
    try:
        from tensorflow.python.framework import ops as tf_ops

        entries = tf_ops.gradient_registry._registry  # noqa: SLF001 - no public way to unregister
    except (ImportError, AttributeError):
        return None
    return entries if isinstance(entries, dict) else None


def _graph_in(value, depth: int):
    """The first graph of a symbolic tensor reachable from ``value`` through closures, lists and tuples."""
    graph = getattr(value, "graph", None)
    if graph is not None and hasattr(graph, "outer_graph"):
        return graph
    if depth <= 0:
        return None
    if isinstance(value, (list, tuple)):
        children = value
    elif callable(value) and getattr(value, "__closure__", None):
        children = []
        for cell in value.__closure__:
            try:
                children.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
    else:
        return None
    for child in children:
        found = _graph_in(child, depth - 1)
        if found is not None:
            return found
    return None


def _captured_ids(graph) -> set[int]:
    """Ids of the outside tensors (variable handles among them) captured by ``graph`` and the graphs it is nested in."""
    ids: set[int] = set()
    while graph is not None:
        for outside, _inside in getattr(graph, "captures", ()):
            ids.add(id(outside))
        graph = getattr(graph, "outer_graph", None)
    return ids


def owned_by(variables: Iterable[tf.Variable]) -> list[str]:
    """The registered custom-gradient names whose graph captured one of ``variables`` (their handles)."""
    entries = _registry()
    handles = {id(variable.handle) for variable in variables}
    if entries is None or not handles:
        return []
    owned = []
    for name, entry in list(entries.items()):
        if not name.startswith(CUSTOM_GRADIENT_PREFIX) or not isinstance(entry, dict):
            continue
        graph = _graph_in(entry.get("type"), CLOSURE_DEPTH)
        if graph is not None and handles & _captured_ids(graph):
            owned.append(name)
    return owned


def release(variables: Iterable[tf.Variable]) -> int:
    """Remove the custom-gradient functions registered for graphs over ``variables`` (a model and its optimizer
    being discarded: call it when no graph of theirs will be differentiated again); how many were removed."""
    entries = _registry()
    if entries is None:
        return 0
    removed = 0
    for name in owned_by(list(variables)):
        if entries.pop(name, None) is not None:
            removed += 1
    return removed
