"""Computation on top of ``ops``: sweeps, special points, metrics, figures, training, state.

Nothing here imports streamlit; the pages in ``explorer.ui`` do.

    import explorer
    result = explorer.sweep("atan", lo=-3, hi=3, n=2001)  # a Sweep: spec, params, range, dtype, frame
    result.frame                                          # x, forward, true_grad, custom_grad, ...
    points = explorer.special_points(result)              # declared vs detected, one-sided values
    table = explorer.metrics(result)                      # peak, fwhm, area, dead zone, ...

The modules are ``explorer.sweeps`` (the :class:`Sweep` and :func:`sweep`), ``explorer.detect`` (where a
sampled curve jumps, bends or is not finite), ``explorer.points``, ``explorer.metrics``,
``explorer.figures``, ``explorer.train``, ``explorer.state``, ``explorer.verify``, ``explorer.export``.
"""

from explorer.metrics import metrics, metrics_table
from explorer.points import special_points
from explorer.sweeps import Sweep, decimate, sweep

__all__ = ["Sweep", "decimate", "metrics", "metrics_table", "special_points", "sweep"]
