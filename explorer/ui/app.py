"""Gradient Explorer's page routing: the script ``streamlit run`` executes.

``app.py`` at the repository root calls :func:`main`; an installed wheel runs this file itself
(``gradient-explorer run``), so the two are one app. Each page lives in its own module here.
"""

import os

import streamlit as st

from explorer.serve import REPLICA_ENV, start_user_code_worker
from explorer.ui import runtime, sign_in

start_user_code_worker()  # your ops' worker imports TensorFlow while this process does (no-op once started)

with runtime.startup_imports():  # the collector paused while TensorFlow and the rest import
    from explorer import cpu, loaded
    from explorer.ui import editor, explore, runs, train


def main() -> None:
    cpu.one_thread_per_op()  # before the first TensorFlow op of the process
    loaded.start_workers()  # the same worker (started above), or a new one if the ops were reloaded
    runtime.skip_direct_execution_warning()
    # A Material icon, not an emoji-like string: Streamlit checks a string icon against its emoji
    # catalogue (loaded on first use, part of every cold start) unless it is ":material/...:".
    st.set_page_config(page_title="Gradient Explorer", page_icon=":material/function:", layout="wide")
    runtime.keep_keras_state_between_reruns()
    sign_in.gate()  # with --login: nothing below runs (no page, no sidebar) until a fresh, allowed sign-in
    pages = [
        st.Page(explore.page, title="Explore", icon=":material/insights:", default=True),
        st.Page(train.page, title="Train", icon=":material/model_training:", url_path="train"),
        st.Page(editor.page, title="Editor", icon=":material/edit:", url_path="editor"),
        st.Page(runs.page, title="Runs", icon=":material/monitoring:", url_path="runs"),
    ]
    page = st.navigation(pages)
    if os.environ.get(REPLICA_ENV):  # one of several servers behind the proxy (gradient-explorer run --replicas)
        with st.sidebar:
            st.fragment(run_every=REPLICA_TIMER_SECONDS)(_replica_caption)()
    page.run()


# Streamlit's browser code reruns the page after a WebSocket reconnect only if the page has a timed fragment
# (or a run was under way); otherwise it assumes its session survived. Behind the proxy a reconnect may land on
# another replica (its own died), in a new session: this timer makes the page run there, from its URL, at once.
# Its own tick (a caption, once per REPLICA_TIMER_SECONDS) costs nothing.
REPLICA_TIMER_SECONDS = 600


def _replica_caption() -> None:
    st.container(key="replica").caption(f"Served by replica {os.environ.get(REPLICA_ENV)}")


if __name__ == "__main__":
    main()
