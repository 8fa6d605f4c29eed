"""Process-wide Streamlit settings the app needs before any page runs."""

from __future__ import annotations

import sys


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
