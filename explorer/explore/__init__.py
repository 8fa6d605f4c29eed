"""Explore one custom gradient: the Explore page's computation, with no streamlit.

``sweeps`` evaluates an op's forward, true and custom gradient on a grid (:class:`~explorer.explore.sweeps.Sweep`);
``detect`` finds where a sampled curve jumps, bends or is not finite; ``points`` locates the special points
and their one-sided values; ``measures`` computes the metrics table; ``figures`` draws them as Plotly figures.
"""
