"""The catalogue of loaded ops: what ``GRADIENT_EXPLORER_OPS`` loads, under which keys, and the look-ups the
pages use (:func:`get`, :func:`names` over the built-ins and the loaded ops).

* An op's key is its function name; where that clashes with a built-in key or with a function of
  another loaded module, every clashing one is ``module.function`` (a URL needs one stable key).
* The pages look every op up with :func:`get` / :func:`names` (built-ins first, then loaded ops), never
  by putting loaded ops into ``ops``' registry: the built-in registry stays the ops the tests and the
  checker enumerate, and a test that loads examples cannot leak them into another test.
* Loading imports the operator's modules to read their names, signatures and declarations; it never calls
  them (that happens in a worker: :mod:`explorer.loaded.lanes`). It runs once per process (:func:`current`),
  in the server and in each worker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import explorer.loaded.lanes as lanes
import ops
from explorer import worker
from explorer.checker import discover
from explorer.loaded.memory import Remembered

OPS_ENV = lanes.OPS_ENV
parse_targets = lanes.parse_targets
DECLARATIONS = "GRADIENT_EXPLORER"  # module-level dict: function name -> from_function keywords (+ "name")
DECLARED_KEYWORDS = ("forward", "points", "ranges", "title", "justification", "input_shapes")  # + "input_ranges"
MAX_REMEMBERED = 64  # failures and check results kept (the oldest are forgotten first)


@dataclass(frozen=True)
class LoadedOp:
    """One loaded ``@tf.custom_gradient`` function: its key in the app, where it came from, its op."""

    key: str
    name: str
    module: str
    spec: ops.OpSpec
    input_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # declared slider ranges


@dataclass(frozen=True)
class LoadedLayer:
    """One loaded ``keras.layers.Layer`` subclass (built with no arguments); :attr:`op_key` is the key of
    the loaded op it calls, found in the background worker at first use."""

    key: str
    name: str
    module: str
    layer_class: type

    @property
    def op_key(self) -> str | None:
        """The loaded op whose output and input gradient the layer reproduces, or None if none matched
        (or the layer could not run: the trainer reports that)."""
        return layer_op_key(self.key)


@dataclass(frozen=True)
class Loaded:
    """What ``GRADIENT_EXPLORER_OPS`` gave: ops and layers by key, and one :class:`discover.LoadError`
    per target (or function) that gave nothing usable."""

    targets: tuple[str, ...] = ()
    ops: Mapping[str, LoadedOp] = field(default_factory=dict)
    layers: Mapping[str, LoadedLayer] = field(default_factory=dict)
    errors: tuple[discover.LoadError, ...] = ()
    cwd: str = ""  # the directory the targets were resolved against (the worker loads them from there too)

    def modules(self) -> dict[str, list[str]]:
        """Op keys grouped by module, in load order (the picker's "Yours · module" groups)."""
        grouped: dict[str, list[str]] = {}
        for item in self.ops.values():
            grouped.setdefault(item.module, []).append(item.key)
        return grouped


def _discover(target: str, cwd: Path) -> discover.Discovered:
    """:func:`discover.discover`, a relative path taken from ``cwd`` and ``cwd`` importable (module names)."""
    path = Path(target)
    if not path.is_absolute() and (cwd / path).exists():
        target_text = str(cwd / path)
    else:
        target_text = target
    sys.path.insert(0, str(cwd))
    try:
        found = discover.discover(target_text)
    finally:
        sys.path.remove(str(cwd))
    # report the target as the operator wrote it
    return discover.Discovered(
        found.functions,
        found.layers,
        [discover.LoadError(target if e.target == target_text else e.target, e.error, e.message) for e in found.errors],
    )


def declarations(item: discover.Found) -> dict[str, Any]:
    """What the function's module declares for it in ``GRADIENT_EXPLORER = {"fn": {...}}`` (the editor's
    export writes one): ``forward``, ``points``, ``ranges``, ``title``, ``justification`` as
    :func:`ops.from_function` takes them, and ``name``, the key to show it under. Empty if none; a value
    that is not a dict is ignored, a bad declaration inside one is a load error from ``from_function``."""
    module = discover.module_of(item.obj)
    table = getattr(module, DECLARATIONS, None)
    declared = table.get(item.name) if isinstance(table, dict) else None
    return dict(declared) if isinstance(declared, dict) else {}


def _keys(modules: list[str], shown: list[str]) -> list[str]:
    """Names as keys; ``module.name`` for every name that clashes (with a built-in or another function)."""
    builtin = set(ops.names())
    return [
        f"{module}.{name}" if name in builtin or shown.count(name) > 1 else name
        for module, name in zip(modules, shown, strict=True)
    ]


def load(value: str | None, cwd: str | Path | None = None) -> Loaded:
    """The ops, layers and load errors of the targets in ``value`` (the environment variable's text)."""
    cwd = Path(cwd or os.getcwd()).resolve()
    targets = parse_targets(value)
    found = discover.Discovered()
    for target in targets:
        found.extend(_discover(target, cwd))
    errors = list(found.errors)
    loaded_ops: dict[str, LoadedOp] = {}
    declared = [declarations(item) for item in found.functions]
    shown = [str(d.get("name") or item.name) for d, item in zip(declared, found.functions, strict=True)]
    keys = _keys([item.module for item in found.functions], shown)
    for item, key, name, extra in zip(found.functions, keys, shown, declared, strict=True):
        try:
            spec = ops.from_function(
                item.obj, key=key, **{k: extra[k] for k in DECLARED_KEYWORDS if k in extra}
            )
        except Exception as error:  # noqa: BLE001 - TypeError/ValueError for what cannot be an op, or a bad declaration
            errors.append(discover.LoadError(f"{item.module}.{item.name}", type(error).__name__, str(error)))
            continue
        try:
            ranges = _input_ranges(extra.get("input_ranges"), spec)
        except ValueError as error:
            errors.append(discover.LoadError(f"{item.module}.{item.name}", "ValueError", str(error)))
            continue
        loaded_ops[key] = LoadedOp(key, name, item.module, spec, ranges)
    layers: dict[str, LoadedLayer] = {}
    for item in found.layers:  # which op a layer calls is found by calling it: in a worker, at first use
        key = item.name if item.name not in loaded_ops and item.name not in layers else f"{item.module}.{item.name}"
        layers[key] = LoadedLayer(key, item.name, item.module, item.obj)
    return Loaded(targets, loaded_ops, layers, tuple(errors), str(cwd))


def _input_ranges(declared: Any, spec: ops.OpSpec) -> dict[str, tuple[float, float]]:
    """``input_ranges = {"lam": (0, 2)}`` in the module's declaration: the slider range of a scalar tensor
    input (without one: :data:`explorer.explore.signature_views.DEFAULT_INPUT_RANGE`)."""
    if declared is None:
        return {}
    inputs = spec.user_function.inputs
    if not isinstance(declared, dict):
        raise ValueError(f"{spec.key}: input_ranges must be a dict input -> (low, high), e.g. {{'{inputs[-1]}': (0, 2)}}")
    ranges = {}
    for name, value in declared.items():
        ok = name in inputs and isinstance(value, (list, tuple)) and len(value) == 2
        ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in value)
        if not ok or not value[0] < value[1]:
            raise ValueError(
                f"{spec.key}: input_ranges[{name!r}] must be (low, high) with low < high for one of the inputs "
                f"{', '.join(inputs)}; got {value!r}"
            )
        ranges[name] = (float(value[0]), float(value[1]))
    return ranges


# -- this process's loaded ops ----------------------------------------------------------------------------
_CURRENT = Remembered("the loaded ops of this process", 1)


def current() -> Loaded:
    """The ops of this process: loaded from ``GRADIENT_EXPLORER_OPS`` at the first call, then kept (a
    worker keeps the ops it loaded at its start: :func:`keep`)."""
    with _CURRENT.lock:
        if "loaded" not in _CURRENT:
            _CURRENT.remember("loaded", load(os.environ.get(OPS_ENV)))
        return _CURRENT["loaded"]


def keep(loaded: Loaded) -> None:
    """Make ``loaded`` this process's ops (a worker, at its start, with the server's targets and cwd)."""
    _CURRENT.remember("loaded", loaded)


def names() -> list[str]:
    """Every op key the pages accept: the built-ins, then the loaded ops."""
    return ops.names() + list(current().ops)


def get(key: str | ops.OpSpec) -> ops.OpSpec:
    """The built-in or loaded op ``key`` (an OpSpec passes through); KeyError names the valid keys."""
    if isinstance(key, ops.OpSpec):
        return key
    found = current().ops.get(key) if isinstance(key, str) else None
    if found is not None:
        return found.spec
    try:
        return ops.get(key)
    except KeyError:
        raise KeyError(f"unknown op {key!r}; valid ops: {', '.join(names())}") from None


def is_loaded(key: str) -> bool:
    return isinstance(key, str) and key in current().ops


def module_of(key: str) -> str | None:
    """The module a loaded op comes from (None for a built-in)."""
    item = current().ops.get(key)
    return None if item is None else item.module


def start_workers() -> bool:
    """Start the sweeps' worker now if the operator loaded any ops (the app calls
    :func:`explorer.serve.start_user_code_worker` earlier still, before its own imports). True if any."""
    here = current()
    if not here.ops and not here.layers:
        return False
    lanes.worker_for(here, lanes.INTERACTIVE)
    return True


# -- the op a loaded layer calls (found in the background lane) ---------------------------------------------
_LAYER_OPS = Remembered("the op each loaded layer calls")


def layer_op_key(layer_key: str) -> str | None:
    """The key of the loaded op loaded layer ``layer_key`` calls (found in the background worker, once)."""
    if layer_key not in _LAYER_OPS:
        try:
            found = lanes.call(
                current(), lanes.BACKGROUND, lanes.on_worker("layer_op_key"), layer_key, time_limit=worker.call_seconds()
            )
        except Exception:  # noqa: BLE001 - a layer that cannot run is reported by the trainer, not here
            found = None
        _LAYER_OPS.remember(layer_key, found)
    return _LAYER_OPS[layer_key]
