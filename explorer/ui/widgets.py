"""Small pieces more than one page shows the same way."""

from __future__ import annotations

import streamlit as st

import ops


def show_formulas(spec: ops.OpSpec) -> None:
    """Forward and custom gradient side by side, in LaTeX."""
    col_forward, col_grad = st.columns(2)
    with col_forward:
        st.markdown("**Forward** (autodiff of this is the true gradient)")
        st.latex(spec.forward_tex)
    with col_grad:
        st.markdown("**Custom gradient** $g(x)$, backward $= dy \\cdot g(x)$")
        st.latex(spec.grad_tex)
