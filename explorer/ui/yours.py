"""What the Explore page shows about your own ops (loaded from ``GRADIENT_EXPLORER_OPS``, see
:mod:`explorer.loaded`): load errors, why an op runs only eagerly, and the checker's results.

The checks take seconds (a ``Model.fit`` and a SavedModel export), so they never block the figure:
:func:`explorer.loaded.checks` runs them in the background worker process, once per (op, parameters), and a
fragment polls every :data:`CHECK_POLL_SECONDS` until they are done, then reruns the page once. The
results stay in the server's cache (shared by every session: the same op at the same parameters
gives the same checks), not in ``st.cache_data``, which would pickle them and would block the run.
The default shows them without a click: a user should not have to know that checks exist.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import streamlit as st

from explorer import loaded
from explorer.ui.widgets import literal

CHECK_POLL_SECONDS = 2.0
LEVEL_MARKS = {"pass": "✅ pass", "skip": "➖ skip", "warn": "⚠️ warn", "fail": "❌ fail"}


def load_errors() -> None:
    """One error per target of GRADIENT_EXPLORER_OPS that gave nothing (missing, failed import, ...)."""
    for error in loaded.current().errors:
        target = error.target.replace("`", "'")  # in a code span Markdown needs no escapes; a backtick ends it
        st.error(
            f"**Could not load `{target}`** from GRADIENT_EXPLORER_OPS: {literal(error.error)}: "
            f"{literal(error.message)}. The rest of the app works; fix the module and restart the server.",
            icon="🛑",
        )


def graph_notes(key: str) -> None:
    """Next to the figure: why a loaded op is shown eagerly, how its keyword parameters are passed, and
    which loaded layer calls it."""
    failure = loaded.graph_failure(key)
    if failure is not None:
        st.warning(
            f"**Fails inside `tf.function`**, so `Model.fit` and a SavedModel fail too: {literal(failure)}. "
            "The figure is computed eagerly, where it works.",
            icon="⚠️",
        )
    for layer in loaded.current().layers.values():
        if layer.op_key == key:
            st.caption(f"Your layer `{layer.name}` calls this function: train it on the Train page.")
    note = loaded.keyword_note(key)
    if note is not None:
        st.info(f"**Graph mode.** {literal(note)}.")


def _table(results: tuple) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "check": [r.name for r in results],
            "result": [LEVEL_MARKS[r.level] for r in results],
            "message": [r.message for r in results],
        }
    )


def _show(results: tuple) -> None:
    counts = {level: sum(r.level == level for r in results) for level in LEVEL_MARKS}
    st.caption(
        f"{len(results)} checks: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail, "
        f"{counts['skip']} skip (the same as `python -m explorer verify`; a warning is not a failure, a skip is a "
        "check that does not apply to this function)"
    )
    st.dataframe(_table(results), hide_index=True, width="stretch")


@st.fragment(run_every=CHECK_POLL_SECONDS)
def _pending(key: str, params: tuple[tuple[str, float], ...]) -> None:
    """Shown while the checks run; reruns the page once they are done (which stops the polling)."""
    if loaded.checks(key, dict(params)).done():
        st.rerun()
    st.caption("Checking this op at these parameters in the background (a few seconds); the results appear here.")


def checks(key: str, params: Mapping[str, float]) -> None:
    """The checker's results for loaded op ``key`` at ``params``: pass / skip / warn / fail with the message."""
    st.subheader("Checks")
    future = loaded.checks(key, params)
    if not future.done() or future.cancelled():  # cancelled: another session asked first; asked again on the tick
        _pending(key, tuple(sorted(params.items())))
        return
    try:
        results = future.result()
    except Exception as error:  # noqa: BLE001 - the checks never raise; if they did, say so here only
        st.error(f"The checks could not run: {literal(type(error).__name__)}: {literal(error)}")
        return
    _show(results)
