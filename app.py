"""Gradient Explorer: Streamlit entry point. Page routing only; each page lives in explorer/ui/."""

import streamlit as st

from explorer.ui import editor, explore, runtime, train

st.set_page_config(page_title="Gradient Explorer", page_icon="∇", layout="wide")
runtime.keep_keras_state_between_reruns()

pages = [
    st.Page(explore.page, title="Explore", icon=":material/insights:", default=True),
    st.Page(train.page, title="Train", icon=":material/model_training:", url_path="train"),
    st.Page(editor.page, title="Editor", icon=":material/edit:", url_path="editor"),
]
st.navigation(pages).run()
