"""Gradient Explorer's page routing: the script ``streamlit run`` executes.

``app.py`` at the repository root calls :func:`main`; an installed wheel runs this file itself
(``gradient-explorer run``), so the two are one app. Each page lives in its own module here.
"""

import os

import streamlit as st

from explorer.serve import REPLICA_ENV, start_user_code_worker
from explorer.ui import runtime

start_user_code_worker()  # your ops' worker imports TensorFlow while this process does (no-op once started)

with runtime.startup_imports():  # the collector paused while TensorFlow and the rest import
    from explorer import cpu, loaded
    from explorer.ui import editor, explore, train


def main() -> None:
    cpu.one_thread_per_op()  # before the first TensorFlow op of the process
    loaded.start_workers()  # the same worker (started above), or a new one if the ops were reloaded
    runtime.skip_direct_execution_warning()
    # A Material icon, not an emoji-like string: Streamlit checks a string icon against its emoji
    # catalogue (loaded on first use, part of every cold start) unless it is ":material/...:".
    st.set_page_config(page_title="Gradient Explorer", page_icon=":material/function:", layout="wide")
    runtime.keep_keras_state_between_reruns()
    pages = [
        st.Page(explore.page, title="Explore", icon=":material/insights:", default=True),
        st.Page(train.page, title="Train", icon=":material/model_training:", url_path="train"),
        st.Page(editor.page, title="Editor", icon=":material/edit:", url_path="editor"),
    ]
    page = st.navigation(pages)
    replica = os.environ.get(REPLICA_ENV)
    if replica:  # one of several servers behind the proxy (gradient-explorer run --replicas)
        st.sidebar.container(key="replica").caption(f"Served by replica {replica}")
    page.run()


if __name__ == "__main__":
    main()
