"""Computation on top of ``ops``: sweeps, special points, metrics, figures, training, state.

Nothing here imports streamlit; the pages in ``explorer.ui`` do.

    import explorer
    result = explorer.sweep("atan", lo=-3, hi=3, n=2001)  # a Sweep: spec, params, range, dtype, frame
    result.frame                                          # x, forward, true_grad, custom_grad, ...
    points = explorer.special_points(result)              # declared vs detected, one-sided values
    table = explorer.metrics(result)                      # peak, fwhm, area, dead zone, ...

The modules are ``explorer.sweeps`` (the :class:`Sweep` and :func:`sweep`), ``explorer.detect`` (where a
sampled curve jumps, bends or is not finite), ``explorer.points``, ``explorer.measures`` (the metrics),
``explorer.figures``, ``explorer.train``, ``explorer.state``, ``explorer.verify``, ``explorer.export``.
"""


import importlib

# Imported on first use (PEP 562), so that ``gradient-explorer run`` and ``--help`` start without TensorFlow.
_EXPORTS = {
    "Sweep": "explorer.sweeps",
    "decimate": "explorer.sweeps",
    "sweep": "explorer.sweeps",
    "special_points": "explorer.points",
    "metrics": "explorer.measures",
    "metrics_table": "explorer.measures",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'explorer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

