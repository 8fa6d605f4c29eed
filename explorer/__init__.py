"""Computation on top of ``ops``: sweeps, special points, metrics, figures, training, state.

Nothing here imports streamlit; the pages in ``explorer.ui`` do.

    import explorer
    result = explorer.sweep("atan", lo=-3, hi=3, n=2001)  # a Sweep: spec, params, range, dtype, frame
    result.frame                                          # x, forward, true_grad, custom_grad, ...
    points = explorer.special_points(result)              # declared vs detected, one-sided values
    table = explorer.metrics(result)                      # peak, fwhm, area, dead zone, ...
    explorer.plot(my_fn); explorer.check(my_fn)           # in a notebook: figure, coloured verdict table

    model.fit(x, y, callbacks=[explorer.Watch("runs", every=100)])  # what each custom gradient sees, recorded
    explorer.watch(model, (x[:64], y[:64])).layers        # the same, once, now (the package is callable)

``sweep``, ``plot``, ``check``, ``plot_training`` and ``interact`` (:mod:`explorer.notebook`) take a built-in
key, an ``OpSpec``, your ``@tf.custom_gradient`` function or a Keras layer directly.

The packages are one per thing the product does: ``explorer.explore`` (sweeps, special points, metrics,
figures), ``explorer.checker`` (the checker, ``python -m explorer verify`` and the pytest guardrail, whose
public path is ``explorer.testing``), ``explorer.train`` (training, data sets, presets and their figures),
``explorer.expr`` (the safe expression language) and ``explorer.ui`` (the Streamlit pages). Beside them:
``notebook`` (the calls above), ``state`` (URL state), ``loaded`` (a team's ops named by the server's
operator), ``export``, ``serve`` and ``cpu``. docs/architecture.md draws the picture.
"""


import importlib

# Imported on first use (PEP 562), so that ``gradient-explorer run`` and ``--help`` start without TensorFlow.
_EXPORTS = {
    "Sweep": "explorer.explore.sweeps",
    "SweepRange": "explorer.explore.sweeps",  # lo, hi, n, dtype, upstream: validated once, taken by every sweep
    "decimate": "explorer.explore.sweeps",
    "sweep": "explorer.notebook",  # explorer.explore.sweeps.sweep, taking your function or layer as well
    "plot": "explorer.notebook",
    "check": "explorer.notebook",
    "plot_training": "explorer.notebook",
    "interact": "explorer.notebook",
    "special_points": "explorer.explore.points",
    "metrics": "explorer.explore.measures",
    "metrics_table": "explorer.explore.measures",
    "Watch": "explorer.watch.callback",  # the Keras callback; explorer.watch(model, probe) is the package, callable
}

# Packages reached as attributes without an import of their own (``explorer.train.compare(...)`` in a notebook).
_PACKAGES = ("explore", "checker", "train", "testing", "watch")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _PACKAGES:
        return importlib.import_module(f"explorer.{name}")  # the import system sets the attribute
    if name not in _EXPORTS:
        raise AttributeError(f"module 'explorer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_PACKAGES})

