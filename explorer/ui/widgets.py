"""Small pieces more than one page shows the same way."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import streamlit as st
from _plotly_utils.utils import is_skipped_key, to_typed_array_spec  # what Figure.to_dict encodes arrays with
from plotly.basedatatypes import BaseFigure

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


_FAST_TYPED = {"float32": "f4", "float64": "f8"}  # plotly's short names (plotlyjsShortTypes) for our arrays


def _typed_array(array: np.ndarray) -> Any:
    """``to_typed_array_spec(array)``: for a non-empty native float32/float64 array the same dict, made
    without plotly's general conversion (narwhals, a read-only copy); anything else goes to plotly."""
    name = _FAST_TYPED.get(str(array.dtype))
    if name is None or array.size == 0 or not array.dtype.isnative:
        return to_typed_array_spec(array)
    spec = {"dtype": name, "bdata": base64.b64encode(np.ascontiguousarray(array)).decode("ascii")}
    if array.ndim > 1:
        spec["shape"] = str(array.shape)[1:-1]
    return spec


def _encoded(value: Any) -> Any:
    """A copy of a figure spec with every NumPy array that is a dict value as plotly's base64 typed-array
    spec: what plotly's ``convert_to_base64`` makes of a copy (same skipped keys, arrays inside lists
    left alone), without walking lists of strings item by item."""
    if isinstance(value, dict):
        return {
            name: item if is_skipped_key(name)
            else _typed_array(item) if isinstance(item, np.ndarray)
            else _encoded(item)
            for name, item in value.items()
        }  # fmt: skip
    if isinstance(value, list):
        return [_encoded(item) if isinstance(item, (dict, list)) else item for item in value]
    return value


def arrow_table(columns: Mapping[str, Sequence[Any] | np.ndarray]) -> pa.Table:
    """A table for ``st.dataframe(..., hide_index=True)`` made straight from its columns (name: NumPy array
    or list), for a cached table shown on every rerun.

    ``st.dataframe`` converts a pandas frame to Arrow on every call (~1 ms for a small table, and
    building the frame costs as much again); an Arrow table it sends as it is. This one has the column
    names, types and values Streamlit makes of a pandas frame of the same columns (strings as
    ``large_string``, like pandas' ``str`` columns; ``tests/test_explore_page.py`` checks that), without
    pandas' index metadata, which a hidden index does not use. Immutable: safe to share from
    ``st.cache_resource``.
    """
    return pa.table({name: _arrow_column(values) for name, values in columns.items()})


def _arrow_column(values: Sequence[Any] | np.ndarray) -> pa.Array:
    if isinstance(values, np.ndarray) and values.dtype != object:
        return pa.array(values)
    values = list(values)
    if values and all(isinstance(value, str) for value in values):
        return pa.array(values, type=pa.large_string())
    return pa.array(values)


class ReadyFigure(BaseFigure):
    """A figure spec of :mod:`explorer.figures` (plain dicts) with its arrays encoded once, ready to send.

    ``st.plotly_chart`` turns what it is given into a dict before writing the JSON
    (``plotly.tools.return_figure_from_figure_or_data``): a plain dict is validated property by property
    (it builds a ``Figure`` from it: ~40 ms for the main figure), a plotly ``Figure`` is deep-copied and
    its arrays base64-encoded (``to_dict``) on every rerun, cached or not. A ReadyFigure passes the
    ``BaseFigure`` test and its ``to_dict`` returns the spec already encoded, so a cached figure costs a
    rerun only the JSON writing. It holds no plotly object tree (``BaseFigure.__init__`` is not run, so
    use :func:`explorer.figures.as_figure` of :attr:`spec` for a real Figure) and is read-only: safe to
    share from ``st.cache_resource``. ``tests/test_explore_page.py`` checks that the page sends exactly
    the figure's JSON, so a Streamlit that stops calling ``to_dict`` fails a test, not a user.
    """

    def __init__(self, spec: dict) -> None:  # noqa: D107  (no BaseFigure.__init__: no object tree)
        layout = spec["layout"]
        # the template is JSON already (figures.template_json): walking its ~800 nodes cost a millisecond
        template = {"template": layout["template"]} if "template" in layout else {}
        encoded = _encoded({"data": spec["data"], "layout": {k: v for k, v in layout.items() if k != "template"}})
        encoded["layout"] = {**template, **encoded["layout"]}
        object.__setattr__(self, "_spec", spec)  # BaseFigure.__setattr__ takes only plotly properties
        object.__setattr__(self, "_encoded", encoded)

    @property
    def spec(self) -> dict:
        """The figure spec as :mod:`explorer.figures` made it (NumPy arrays)."""
        return self._spec

    def to_dict(self) -> dict:
        return dict(self._encoded)  # a new outer dict; the encoded parts are never changed

    def __repr__(self) -> str:
        return f"ReadyFigure({len(self.spec['data'])} traces)"

