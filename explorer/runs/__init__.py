"""The Runs page's computation, no streamlit: figures of a recorded run, what-if under another backward, links."""
