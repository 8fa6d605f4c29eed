"""Small pieces more than one page shows the same way."""

from __future__ import annotations

import re

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


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]$~])")


def literal(text: str) -> str:
    """``text`` escaped so that st.error / st.warning (which render Markdown) show it verbatim:
    a parser message quoting ``__import__`` or a URL value like ``**x**`` stays as typed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text))
