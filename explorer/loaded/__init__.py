"""Your own ops in the app: the functions and layers the operator loaded with ``GRADIENT_EXPLORER_OPS``.

The environment variable (set by ``gradient-explorer run --ops`` and ``make run OPS=``, see
:mod:`explorer.serve`) names comma-separated targets, resolved against the working directory and
discovered exactly as ``python -m explorer verify TARGET`` discovers them (:mod:`explorer.checker.discover`).
Loading happens once per server process (:func:`current`); no page, URL or typed text ever loads or
runs code: a URL names a loaded op by its key only. Nothing here imports streamlit.

User code is not trusted to behave, and never runs in the server's process: every call into it runs in a
worker process that imports the operator's modules once and stays warm. One module per concern:

* ``catalogue``: loading, keys and the look-ups (:func:`load`, :func:`current`, :func:`get`, :func:`names`,
  :func:`is_loaded`), and the op a loaded layer calls;
* ``lanes``: the one place that knows the worker processes (``interactive``, ``background``, ``training``),
  how they start, how a call reaches them and how a failure is worded (:class:`UserOpError`);
* ``sweeps``: guarded sweeps and probes of a loaded op (:func:`sweep`, :func:`sweep_and_points`,
  :func:`problem`, :func:`graph_failure`); ``views``: a function of any signature drawn through a view
  (:func:`layout`, :func:`view_sweep_and_points`, :func:`untrainable`);
* ``background``: the checker's results (:func:`checks`); ``training``: :class:`WorkerSession`;
* ``worker_side``: what runs in the workers (named for where it runs; the server never imports it);
* ``memory``: each cache a :class:`~explorer.loaded.memory.Remembered` beside its code; :func:`reset`
  clears them all and stops the workers.

The names below are imported from those modules when first used: :mod:`explorer.serve` imports ``lanes``
before the server imports TensorFlow, and importing this package must not import it.
"""

from __future__ import annotations

import importlib
from typing import Any

import explorer.loaded.lanes as lanes
import explorer.loaded.memory as memory

_WHERE = {
    "catalogue": (
        "LoadedOp", "LoadedLayer", "Loaded", "load", "declarations", "current", "keep", "names", "get",
        "is_loaded", "module_of", "start_workers", "layer_op_key", "DECLARATIONS", "DECLARED_KEYWORDS",
        "MAX_REMEMBERED",
    ),
    "lanes": (
        "OPS_ENV", "LANES", "INTERACTIVE", "BACKGROUND", "TRAINING", "UserOpError", "parse_targets",
        "stop_workers", "worker_pids", "warm_up",
    ),
    "sweeps": ("sweep", "sweep_and_points", "problem", "graph_failure", "keyword_note", "NUMPY_HINT"),
    "views": ("layout", "view_spec", "view_sweep_and_points", "untrainable", "ViewSweep"),
    "background": ("checks", "CHECK_TIME_LIMIT"),
    "training": ("WorkerSession", "needs_worker"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = sorted([*_MODULE_OF, "reset"])


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return __all__


def reset() -> None:
    """Forget the loaded ops and everything remembered about them (every
    :class:`~explorer.loaded.memory.Remembered`; checks not started are cancelled) and stop their workers;
    the next :func:`current` loads again."""
    memory.forget_all()
    lanes.stop_workers()
