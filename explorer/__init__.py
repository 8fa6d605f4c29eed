"""Computation on top of ``ops``: sweeps, special points, metrics, figures, training, state.

Nothing here imports streamlit; the pages in ``explorer.ui`` do.
"""
