"""The Explore page's "Other Keras backends" panel: a loaded ``keras.ops.custom_gradient`` function's forward and
custom gradient on each installed Keras backend drawn over TensorFlow's, the inputs where they differ shaded and
listed, and the ``backends`` verdict beside the figure (issue 38).

The backend workers (:mod:`explorer.checker.backends`, one process per backend) start on demand, when such a
function is first shown, in a background lane of their own (a one-thread executor): the figure and the checks of
the page never wait for them. A fragment polls until the result is there, then reruns the page once. Results are
kept per (function, range) in the server (the same for every session).
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading

import numpy as np
import streamlit as st

from explorer import loaded
from explorer.checker import backend_run
from explorer.checker import backends as across
from explorer.explore.backend_figure import backends_figure
from explorer.loaded.memory import Remembered
from explorer.ui.widgets import literal, show_chart

POLL_SECONDS = 2.0
POINTS = 401
MAX_LISTED = 12  # differing inputs listed beside the figure
_LANE = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="backends-lane")
# one comparison per (module, function, range): the newest 32 kept, so that a server's memory does not grow with
# every range its users try (an evicted range is computed again if asked for)
_RESULTS = Remembered("backend comparisons by function and range", limit=32)
_LOCK = threading.Lock()


def keras_function(key: str) -> tuple[str, str] | None:
    """``(file, name)`` of loaded op ``key`` when it is written with ``keras.ops.custom_gradient``, else None."""
    item = loaded.current().ops.get(key) if loaded.is_loaded(key) else None
    module = sys.modules.get(item.module) if item is not None else None
    if module is None:
        return None
    try:
        if item.name not in backend_run.keras_names_in(module):
            return None
        return across.where_defined(getattr(module, item.name))
    except (OSError, SyntaxError, ValueError):
        return None


def _future(target: str, name: str, lo: float, hi: float) -> concurrent.futures.Future:
    key = (target, name, float(lo), float(hi))
    with _LOCK:
        if key not in _RESULTS:
            _RESULTS.remember(key, _LANE.submit(across.sweep_backends, target, name, across.BACKENDS, lo, hi, POINTS))
        _RESULTS.touch(key)
        return _RESULTS[key]


@st.fragment(run_every=POLL_SECONDS)
def _pending(target: str, name: str, lo: float, hi: float) -> None:
    if _future(target, name, lo, hi).done():
        st.rerun()
    st.caption("Running it on the other installed Keras backends, each in a worker process of its own (the first "
               "time, their start takes some seconds); the figure appears here.")


def panel(key: str, lo: float, hi: float) -> None:
    """The panel for loaded op ``key`` on [lo, hi]; nothing for an op not written with keras.ops.custom_gradient."""
    found = keras_function(key)
    if found is None:
        return
    st.subheader("Other Keras backends")
    others = [b for b in across.BACKENDS[1:] if across.installed(b)]
    if not others:
        st.caption("Only TensorFlow is installed here: " + "; ".join(across.INSTALL[b] for b in across.BACKENDS[1:]))
        return
    target, name = found
    future = _future(target, name, lo, hi)
    if not future.done():
        _pending(target, name, lo, hi)
        return
    try:
        swept = future.result()
    except Exception as error:  # noqa: BLE001 - never a traceback in the page
        st.error(f"The backends could not be compared: {literal(type(error).__name__)}: {literal(error)}")
        return
    col_figure, col_side = st.columns([2, 1])
    with col_figure:
        if swept.curves:
            figure = backends_figure(swept.x, swept.curves, swept.differs, f"backends {swept.verdict.level}", name)
            show_chart(figure, key="backends_figure", filename=f"{name}_backends")
        else:
            st.caption(f"`{name}` takes several inputs: it is compared on the checker's inputs (the verdict), not "
                       "drawn along one of them.")
    with col_side:
        message = literal(swept.verdict.message)
        if swept.verdict.level == "fail":
            st.error(f"**backends: fail.** {message}", icon="❌")
        elif swept.verdict.level == "pass":
            st.success(f"**backends: pass.** {message}", icon="✅")
        else:
            st.info(f"**backends: {swept.verdict.level}.** {message}")
        listed = swept.differing_inputs(MAX_LISTED)
        if listed:
            st.caption(f"Inputs where the backends differ on this range ({int(np.sum(swept.differs))} of "
                       f"{len(swept.x)} points; the first {len(listed)}):")
            table = {"x": listed}
            for backend, curve in swept.curves.items():
                if "gradient" in curve and np.shape(curve["gradient"]) == np.shape(swept.x):
                    table[f"{backend} gradient"] = [float(v) for v in curve["gradient"][swept.differs][:MAX_LISTED]]
            st.dataframe(table, hide_index=True)
