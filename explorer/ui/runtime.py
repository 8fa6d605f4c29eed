"""Process-wide Streamlit settings the app needs before any page runs."""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator


def keep_keras_state_between_reruns() -> None:
    """Stop Streamlit from calling ``keras.backend.clear_session()`` after every script run.

    Streamlit does that whenever keras is imported. Here it costs ~150 ms per rerun (a full
    ``gc.collect`` plus TensorFlow's kernel cache, which makes the next sweep ~50x slower), and it
    resets TensorFlow's default graph while another user's session may be tracing a function.
    Our few models live in each user's session state, so there is nothing to clean. Matplotlib's
    clean-up is kept. ``_clean_problem_modules`` is private: if it moves, nothing is patched.
    """
    from streamlit.runtime.scriptrunner import script_runner

    current = getattr(script_runner, "_clean_problem_modules", None)
    if current is None or getattr(current, "keeps_keras_state", False):
        return

    def clean_problem_modules_except_keras() -> None:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            pyplot.close("all")

    clean_problem_modules_except_keras.keeps_keras_state = True
    script_runner._clean_problem_modules = clean_problem_modules_except_keras


def skip_direct_execution_warning() -> None:
    """Spare the first page of a process Streamlit's check for being run without ``streamlit run``.

    On the first element it draws, Streamlit decides whether to warn "use streamlit run" by calling
    ``inspect.stack()``, which looks up the module of every frame by walking ``sys.modules``: with
    TensorFlow's ~10,000 modules loaded that took ~0.28 s of the first run of every server process
    (and of every AppTest). This app always runs under ``streamlit run`` or AppTest, where the
    warning never applies. ``_use_warning_has_been_displayed`` is private: if it moves, nothing is
    changed (``tests/test_explore_page.py`` checks that it still exists).
    """
    from streamlit import delta_generator

    if hasattr(delta_generator, "_use_warning_has_been_displayed"):
        delta_generator._use_warning_has_been_displayed = True


_STARTUP_LOCK = threading.Lock()
_STARTED = False


@contextlib.contextmanager
def startup_imports() -> Iterator[None]:
    """Run the app's imports (TensorFlow, Keras, pandas, plotly: ~600,000 objects) with Python's cyclic
    garbage collector paused, the first time in a process; then freeze every object alive
    (``gc.freeze()``) and let the collector run again. Later entries change nothing.

    Paused: while TensorFlow imports, the collector otherwise runs a few hundred collections, the later
    ones walking hundreds of thousands of objects that are all alive: 0.5-0.7 s of the 2.7-3.4 s import
    on this machine, i.e. of every server's first page.

    Frozen: with ``runner.postScriptGC`` off, Python's own collector still runs a full collection now and
    then, which with everything loaded walked ~360,000 objects: ~220 ms holding the GIL in the middle of
    some user's rerun. Frozen, those objects (modules, classes, functions: alive for the life of the
    server) are skipped (measured: 218 ms -> under 1 ms). Not collected first (that would add ~270 ms to
    the first run): the ~1,100 unreachable objects the paused imports leave stay frozen.

    Only the first entrant pauses: sessions' script threads may run this concurrently, and none must
    leave the collector off.
    """
    global _STARTED
    with _STARTUP_LOCK:
        first, _STARTED = not _STARTED, True
    pause = first and gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if first:
            gc.freeze()
        if pause:
            gc.enable()
