"""Computation on top of ``ops``: sweeps, special points, metrics, figures, training, state.

Nothing here imports streamlit; the pages in ``explorer.ui`` do.

    import explorer
    df = explorer.sweep("atan", lo=-3, hi=3, n=2001)      # x, forward, true_grad, custom_grad, ...
    points = explorer.special_points(df)                  # declared vs detected, one-sided values
    table = explorer.metrics(df)                          # peak, fwhm, area, dead zone, ...

The submodules are imported as ``explorer.sweep`` etc. by ``from explorer.sweep import ...``;
the package attribute ``explorer.sweep`` is the function.
"""

from explorer.metrics import metrics, metrics_table
from explorer.points import special_points
from explorer.sweep import decimate, sweep

__all__ = ["decimate", "metrics", "metrics_table", "special_points", "sweep"]
