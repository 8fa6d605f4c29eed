"""Editor page: write a forward and a custom gradient as expressions, plot them, check them, export them.

The editor's contents are an :class:`explorer.state.EditorSource`, kept in the URL (see
``explorer.state``), read once per session and written back whenever a new op compiles. A rejected
expression shows the parser's message and leaves the last good op on screen; a bad URL value shows a
notice, never an exception. The last source that compiled is ``st.session_state[GOOD_KEY]``; the
Train page offers its op too.
"""

from __future__ import annotations

import streamlit as st

import ops
from explorer import export, expr
from explorer.checker import runner
from explorer.checker.common import Check
from explorer.explore import figures
from explorer.explore.points import display_table, special_points
from explorer.explore.sweeps import sweep
from explorer.state import (
    DEFAULT,
    EDITOR_SOURCE_KEY,
    EditorSource,
    compile_editor_op,
    editor_from_query,
    editor_to_query,
)
from explorer.ui.widgets import literal, show_chart, show_formulas

MAX_PARAMS = expr.MAX_PARAMS
MAX_CACHED = 16
GOOD_KEY = EDITOR_SOURCE_KEY  # the last source that compiled: what the page shows
ERROR_KEY = "editor.error"  # the parser's message for the last submitted source, if it was rejected
NOTICES_KEY = "editor.notices"
LEVEL_ICONS = {"pass": "✅", "skip": "➖", "warn": "⚠️", "fail": "❌"}


# -- cached computation (keyed on the source text) ----------------------------------------------------
def compiled_op(source: EditorSource) -> ops.OpSpec:
    """The compiled user op; raises expr.ExpressionError (not cached) for a rejected source."""
    return compile_editor_op(source)


@st.cache_resource(max_entries=MAX_CACHED, show_spinner=False)
def cached_view(source: EditorSource, values: tuple[tuple[str, float], ...]):
    """Sweep, points and figure: shared read-only objects (a Sweep holds the op, which does not pickle)."""
    spec = compiled_op(source)
    result = sweep(spec, params=dict(values))
    points = special_points(result)
    return result, points, figures.main_figure(result, points, title=spec.title)


@st.cache_data(max_entries=MAX_CACHED, show_spinner="Running the gradient checker...")
def cached_checks(source: EditorSource, values: tuple[tuple[str, float], ...]) -> list[Check]:
    return runner.check(compiled_op(source), **dict(values))


@st.cache_data(max_entries=MAX_CACHED, show_spinner=False)
def cached_exports(source: EditorSource, values: tuple[tuple[str, float], ...]) -> dict[str, str]:
    return export.files(compiled_op(source), **dict(values))


# -- widgets ------------------------------------------------------------------------------------------
def _seed_widgets(source: EditorSource) -> None:
    """Put ``source`` into the form's widget keys."""
    st.session_state["editor.name"] = source.name
    st.session_state["editor.forward"] = source.forward
    st.session_state["editor.gradient"] = source.gradient
    st.session_state["editor.points"] = source.points
    for row in range(MAX_PARAMS):
        name, default, low, high = source.params[row] if row < len(source.params) else ("", 1.0, 0.0, 2.0)
        st.session_state[f"editor.p{row}.name"] = name
        st.session_state[f"editor.p{row}.default"] = float(default)
        st.session_state[f"editor.p{row}.low"] = float(low)
        st.session_state[f"editor.p{row}.high"] = float(high)


def _source_from_widgets() -> EditorSource:
    params = []
    for row in range(MAX_PARAMS):
        name = st.session_state[f"editor.p{row}.name"].strip()
        if name:
            params.append(
                (
                    name,
                    float(st.session_state[f"editor.p{row}.default"]),
                    float(st.session_state[f"editor.p{row}.low"]),
                    float(st.session_state[f"editor.p{row}.high"]),
                )
            )
    return EditorSource(
        name=st.session_state["editor.name"].strip(),
        forward=st.session_state["editor.forward"],
        gradient=st.session_state["editor.gradient"],
        params=tuple(params),
        points=st.session_state["editor.points"],
    )


def _try_compile(source: EditorSource) -> bool:
    """Compile ``source``; on success it becomes the good source, else its error is kept for display."""
    try:
        compiled_op(source)
    except expr.ExpressionError as error:
        st.session_state[ERROR_KEY] = str(error)
        return False
    st.session_state[GOOD_KEY] = source
    st.session_state[ERROR_KEY] = None
    return True


def _on_plot() -> None:
    _try_compile(_source_from_widgets())


def _initialise() -> None:
    """Once per session: the source from the URL (or the example), compiled if possible."""
    if GOOD_KEY in st.session_state:
        return
    source, notices = editor_from_query(st.query_params.to_dict())
    st.session_state[NOTICES_KEY] = notices
    st.session_state[GOOD_KEY] = DEFAULT
    st.session_state[ERROR_KEY] = None
    if source is None:
        source = DEFAULT
    _seed_widgets(source)
    if not _try_compile(source):
        st.session_state[NOTICES_KEY].append(
            "The op in the URL did not compile (see the message below); the example is shown."
        )


def _help() -> None:
    st.markdown(
        "Write the **forward** and the **custom gradient g(x)** (the backward is `dy * g(x)`) as expressions in "
        "`x` and up to three parameters. Allowed: numbers, `x`, your parameter names, `pi`, `e`, "
        "`+ - * / **`, comparisons `< <= > >= == !=` (a comparison used as a number is 0 or 1; chains such as "
        "`0 <= x <= 1` work), and the functions below. Exponents must not depend on x. "
        "Nothing you type is ever run as Python: text is parsed and checked against this allowlist, then "
        "built from TensorFlow ops. Special points: numbers or expressions of the parameters, comma-separated, "
        "each optionally `:kind` (jump, kink, boundary, singular), e.g. `0, -1/k, 1:kink`."
    )
    st.dataframe(expr.help_table(), hide_index=True)


def _form() -> None:
    with st.form("editor.form"):
        st.text_input("Op name", key="editor.name", help="letters, digits and _, starting with a letter")
        col_forward, col_gradient = st.columns(2)
        col_forward.text_area("Forward f(x)", key="editor.forward", height=80)
        col_gradient.text_area("Custom gradient g(x) (backward = dy * g(x))", key="editor.gradient", height=80)
        st.caption("Parameters (leave a name empty to drop that row)")
        for row in range(MAX_PARAMS):
            cols = st.columns(4)
            cols[0].text_input(
                "name", key=f"editor.p{row}.name", label_visibility="visible" if row == 0 else "collapsed"
            )
            for col, field in zip(cols[1:], ("default", "low", "high"), strict=True):
                col.number_input(
                    field,
                    key=f"editor.p{row}.{field}",
                    format="%g",
                    label_visibility="visible" if row == 0 else "collapsed",
                )
        st.text_input("Declared special points", key="editor.points", help="e.g. 0, -1/k, 1:kink")
        st.form_submit_button("Plot", type="primary", on_click=_on_plot)


def _sliders(spec: ops.OpSpec, source: EditorSource) -> dict[str, float]:
    values = {}
    if not spec.params:
        return values
    cols = st.columns(len(spec.params))
    for col, param in zip(cols, spec.params, strict=True):
        key = f"editor.slider.{hash(source)}.{param.name}"
        values[param.name] = col.slider(
            param.name, float(param.low), float(param.high), float(param.default), key=key, format="%g"
        )
    return values


def _checklist(checks: list[Check]) -> None:
    for result in checks:
        text = f"**{result.name}**: {result.message}"
        if result.level == "pass":
            st.success(text, icon=LEVEL_ICONS["pass"])
        elif result.level == "warn":
            st.warning(text, icon=LEVEL_ICONS["warn"])
        elif result.level == "skip":  # a check that does not apply (none for an editor op, elementwise by design)
            st.info(text, icon=LEVEL_ICONS["skip"])
        else:
            st.error(text, icon=LEVEL_ICONS["fail"])


def page() -> None:
    st.title("Editor: write your own custom gradient")
    _initialise()
    for notice in st.session_state.get(NOTICES_KEY, []):
        st.warning(literal(notice), icon="⚠️")
    with st.expander("The expression language", expanded=False):
        _help()
    _form()

    error = st.session_state.get(ERROR_KEY)
    if error:
        st.error(f"Not compiled: {literal(error)}. The last op that compiled is still shown below.", icon="❌")

    source: EditorSource = st.session_state[GOOD_KEY]
    spec = compiled_op(source)
    st.subheader(f"{spec.title}")
    show_formulas(spec)

    values = _sliders(spec, source)
    key = tuple(sorted(values.items()))
    try:
        _, points, figure = cached_view(source, key)
    except ValueError as problem:  # e.g. a parameter value outside a declared range
        st.error(f"Cannot sweep this op: {literal(problem)}")
        points = figure = None
    if figure is not None:
        show_chart(figure, key="editor.figure", filename=spec.key)
        st.subheader("Special points")
        if points.empty:
            st.caption("No special points declared or detected in [-3, 3].")
        else:
            st.dataframe(display_table(points), hide_index=True)

    st.subheader("Gradient checker")
    _checklist(cached_checks(source, key))

    st.subheader("Export")
    files = cached_exports(source, key)
    (module_file, module_text), (test_file, test_text) = files.items()
    col_module, col_test = st.columns(2)
    col_module.download_button(
        f"Module ({module_file})", data=module_text, file_name=module_file, mime="text/x-python", on_click="ignore"
    )
    col_test.download_button(
        f"Tests ({test_file})", data=test_text, file_name=test_file, mime="text/x-python", on_click="ignore"
    )
    with st.expander("Show the module"):
        st.code(module_text, language="python")

    query = editor_to_query(source)
    if any(st.query_params.get(k) != v for k, v in query.items()):
        for k, v in query.items():
            st.query_params[k] = v
