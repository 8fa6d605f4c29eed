"""What a person reads in an st.warning / st.error: its Markdown source with the escapes removed."""

import re


def shown(element) -> str:
    return re.sub(r"\\(.)", r"\1", element.value)
